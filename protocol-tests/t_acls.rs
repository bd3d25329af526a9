//! CreateAcls / DescribeAcls / DeleteAcls v1–3 and their enforcement: SECURITY_DISABLED
//! without an authorizer; Kafka's validation; filters; CLUSTER_AUTHORIZATION_FAILED for a
//! principal without cluster ALTER/DESCRIBE; and, with ACLs granted to `User:ANONYMOUS`
//! (what a PLAINTEXT connection is), Metadata hiding topics, Produce refused without
//! WRITE with nothing appended, deny beating allow, prefixed grants.

use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{
    ApiKey, CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest, MetadataRequest,
};

use crate::broker::now_ms;
use crate::ops::*;
use crate::records::batch_of;

const TOPIC: i8 = 2;
const CLUSTER: i8 = 4;
const LITERAL: i8 = 3;
const PREFIXED: i8 = 4;
const ANY: i8 = 1;
const MATCH: i8 = 2;
const READ: i8 = 3;
const WRITE: i8 = 4;
const DESCRIBE: i8 = 8;
const ALLOW: i8 = 3;
const DENY: i8 = 2;

const SECURITY_DISABLED: i16 = 54;
const INVALID_REQUEST: i16 = 42;
const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
const TOPIC_AUTHORIZATION_FAILED: i16 = 29;

fn creation(rt: i8, name: &str, pt: i8, principal: &str, op: i8, perm: i8) -> AclCreation {
    AclCreation::default()
        .with_resource_type(rt)
        .with_resource_name(sb(name))
        .with_resource_pattern_type(pt)
        .with_principal(sb(principal))
        .with_host(sb("*"))
        .with_operation(op)
        .with_permission_type(perm)
}

fn anon_topic(name: &str, pt: i8, op: i8, perm: i8) -> AclCreation {
    creation(TOPIC, name, pt, "User:ANONYMOUS", op, perm)
}

fn describe_all(_v: i16) -> DescribeAclsRequest {
    // kafka-protocol's defaults for the nullable filters are "" (a name), not null.
    DescribeAclsRequest::default()
        .with_resource_name_filter(None)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_resource_type_filter(ANY)
        .with_pattern_type_filter(ANY)
        .with_operation(ANY)
        .with_permission_type(ANY)
}

fn any_filter() -> DeleteAclsFilter {
    DeleteAclsFilter::default()
        .with_resource_name_filter(None)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_resource_type_filter(ANY)
        .with_pattern_type_filter(ANY)
        .with_operation(ANY)
        .with_permission_type(ANY)
}

#[test]
fn acl_apis_answer_security_disabled_without_an_authorizer() {
    let ctx = Ctx::new();
    let mut c = ctx.client();
    for v in ctx.versions_req(ApiKey::CreateAcls, 1, 3) {
        let req = CreateAclsRequest::default()
            .with_creations(vec![anon_topic("t", LITERAL, READ, ALLOW)]);
        let resp = c.call(v, &req);
        assert_eq!(resp.results.len(), 1);
        assert_code!(
            resp.results[0].error_code,
            SECURITY_DISABLED,
            "CreateAcls v{v}"
        );
    }
    for v in ctx.versions_req(ApiKey::DescribeAcls, 1, 3) {
        let resp = c.call(v, &describe_all(v));
        assert_code!(resp.error_code, SECURITY_DISABLED, "DescribeAcls v{v}");
    }
    for v in ctx.versions_req(ApiKey::DeleteAcls, 1, 3) {
        let resp = c.call(
            v,
            &DeleteAclsRequest::default().with_filters(vec![any_filter()]),
        );
        assert_eq!(resp.filter_results.len(), 1);
        assert_code!(
            resp.filter_results[0].error_code,
            SECURITY_DISABLED,
            "DeleteAcls v{v}"
        );
    }
}

#[test]
fn acls_are_created_described_deleted_and_enforced() {
    if std::env::var("TERN_PROTOCOL_TARGET").is_ok() {
        return; // needs broker restarts with other flags
    }
    let mut ctx = Ctx::with_args(&["--authorizer", "acl", "--super-users", "User:ANONYMOUS"]);
    let mut c = ctx.client();
    let pre_a = ctx.topic("aclpre.a", 1, &[]);
    let pre_b = ctx.topic("aclpre.b", 1, &[]);
    // The prefix both names share (the suite puts its own prefix before "aclpre.").
    let family = pre_a.name[..pre_a.name.find("aclpre.").unwrap() + "aclpre.".len()].to_string();
    let other = ctx.topic("aclother", 1, &[]);
    // As a super user: every version creates, describes and deletes.
    for v in ctx.versions_req(ApiKey::CreateAcls, 1, 3) {
        let req = CreateAclsRequest::default().with_creations(vec![
            anon_topic("v-probe", LITERAL, READ, ALLOW),
            anon_topic("x", MATCH, READ, ALLOW),
            creation(TOPIC, "x", LITERAL, "ANONYMOUS", READ, ALLOW),
            creation(
                CLUSTER,
                "not-the-cluster",
                LITERAL,
                "User:a",
                DESCRIBE,
                ALLOW,
            ),
            anon_topic("", LITERAL, READ, ALLOW),
        ]);
        let resp = c.call(v, &req);
        let codes: Vec<i16> = resp.results.iter().map(|r| r.error_code).collect();
        assert_eq!(
            codes,
            vec![
                NONE,
                INVALID_REQUEST,
                INVALID_REQUEST,
                INVALID_REQUEST,
                INVALID_REQUEST
            ],
            "CreateAcls v{v}: {resp:?}"
        );
        let described = c.call(v, &describe_all(v));
        assert_code!(described.error_code, NONE, "DescribeAcls v{v}");
        assert_eq!(
            described.resources.len(),
            1,
            "DescribeAcls v{v}: {described:?}"
        );
        assert_eq!(described.resources[0].resource_name.as_str(), "v-probe");
        let deleted = c.call(
            v,
            &DeleteAclsRequest::default().with_filters(vec![
                any_filter().with_resource_name_filter(Some(sb("v-probe"))),
                any_filter().with_operation(0),
            ]),
        );
        assert_code!(
            deleted.filter_results[0].error_code,
            NONE,
            "DeleteAcls v{v}"
        );
        assert_eq!(deleted.filter_results[0].matching_acls.len(), 1);
        assert_code!(
            deleted.filter_results[1].error_code,
            INVALID_REQUEST,
            "DeleteAcls v{v}"
        );
        assert!(c.call(v, &describe_all(v)).resources.is_empty());
    }
    // The grants: READ on the prefix, WRITE allowed and denied on pre_b, WRITE on pre_a.
    let resp = c.call(
        3,
        &CreateAclsRequest::default().with_creations(vec![
            anon_topic(&family, PREFIXED, READ, ALLOW),
            anon_topic(&pre_b.name, LITERAL, WRITE, ALLOW),
            anon_topic(&pre_b.name, LITERAL, WRITE, DENY),
            anon_topic(&pre_a.name, LITERAL, WRITE, ALLOW),
        ]),
    );
    assert!(
        resp.results.iter().all(|r| r.error_code == NONE),
        "{resp:?}"
    );
    // MATCH finds what applies to pre_b: the prefixed READ and both literals.
    let matched = c.call(
        3,
        &describe_all(3)
            .with_resource_type_filter(TOPIC)
            .with_pattern_type_filter(MATCH)
            .with_resource_name_filter(Some(sb(&pre_b.name))),
    );
    let acls: usize = matched.resources.iter().map(|r| r.acls.len()).sum();
    assert_eq!(acls, 3, "MATCH {}: {matched:?}", pre_b.name);

    // Now without super users: only the ACLs count.
    ctx.broker.set_args(&["--authorizer", "acl"]);
    ctx.broker.restart();
    let mut c = ctx.client();
    let v = ctx.max_version(ApiKey::Metadata);
    let md = c.call(v, &MetadataRequest::default().with_topics(None));
    let mut names: Vec<String> = md
        .topics
        .iter()
        .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
        .collect();
    names.sort();
    let mut want = vec![pre_a.name.clone(), pre_b.name.clone()];
    want.sort();
    assert_eq!(names, want, "Metadata lists only the prefix-granted topics");
    let named = c.call(v, &metadata_req(v, Some(&[&other.name, "aclnever"]), true));
    for t in &named.topics {
        assert_code!(
            t.error_code,
            TOPIC_AUTHORIZATION_FAILED,
            "Metadata of {:?}",
            t.name
        );
        assert!(t.partitions.is_empty());
    }
    // KIP-430: the bits of READ and its implied DESCRIBE, WRITE on pre_a.
    let md = c.call(
        v,
        &metadata_req(v, Some(&[&pre_a.name]), false)
            .with_include_topic_authorized_operations(true),
    );
    assert_eq!(
        md.topics[0].topic_authorized_operations,
        (1 << READ) | (1 << DESCRIBE) | (1 << WRITE)
    );
    // Produce: WRITE on pre_a works; pre_b's deny beats its allow; other has nothing.
    let pv = ctx.max_version(ApiKey::Produce);
    let ok = produce(&mut c, pv, &pre_a, 0, batch_of(3, now_ms()));
    assert_code!(ok.error_code, NONE, "produce to {}", pre_a.name);
    for t in [&pre_b, &other] {
        let refused = produce(&mut c, pv, t, 0, batch_of(3, now_ms()));
        assert_code!(
            refused.error_code,
            TOPIC_AUTHORIZATION_FAILED,
            "produce to {}",
            t.name
        );
    }
    // Nothing was appended to pre_b: READ lets us see its end offset is still 0.
    let lv = ctx.max_version(ApiKey::ListOffsets);
    let end = list_offsets(&mut c, lv, &pre_b.name, 0, LATEST);
    assert_code!(end.error_code, NONE, "ListOffsets {}", pre_b.name);
    assert_eq!(end.offset, 0, "nothing appended to {}", pre_b.name);
    let end = list_offsets(&mut c, lv, &pre_a.name, 0, LATEST);
    assert_eq!(end.offset, 3);
    // Fetch: READ on the prefix, none on other.
    let fv = ctx.max_version(ApiKey::Fetch);
    let p = fetch(&mut c, fv, &pre_a, 0, FetchOpts::at(0));
    assert_code!(p.error_code, NONE, "fetch {}", pre_a.name);
    let p = fetch(&mut c, fv, &other, 0, FetchOpts::at(0));
    assert_code!(
        p.error_code,
        TOPIC_AUTHORIZATION_FAILED,
        "fetch {}",
        other.name
    );
    // No cluster ALTER/DESCRIBE: the ACL APIs are refused.
    let resp = c.call(
        3,
        &CreateAclsRequest::default().with_creations(vec![anon_topic("x", LITERAL, READ, ALLOW)]),
    );
    assert_code!(
        resp.results[0].error_code,
        CLUSTER_AUTHORIZATION_FAILED,
        "CreateAcls"
    );
    let resp = c.call(3, &describe_all(3));
    assert_code!(
        resp.error_code,
        CLUSTER_AUTHORIZATION_FAILED,
        "DescribeAcls"
    );
    let resp = c.call(
        3,
        &DeleteAclsRequest::default().with_filters(vec![any_filter()]),
    );
    assert_code!(
        resp.filter_results[0].error_code,
        CLUSTER_AUTHORIZATION_FAILED,
        "DeleteAcls"
    );
}
