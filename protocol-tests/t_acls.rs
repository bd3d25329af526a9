//! CreateAcls / DescribeAcls / DeleteAcls v1–3 and their enforcement: SECURITY_DISABLED
//! without an authorizer; Kafka's validation; filters; CLUSTER_AUTHORIZATION_FAILED for a
//! principal without cluster ALTER/DESCRIBE; and, with ACLs granted to `User:ANONYMOUS`
//! (what a PLAINTEXT connection is), Metadata hiding topics, Produce refused without
//! WRITE with nothing appended, deny beating allow, prefixed grants; and the matrix: every
//! ACL-checked API refused without its ACL, served with it, and served to a super user
//! who holds none (KIP-430 answers listing every supported operation).

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

// ------------------------------------------------------------------ the API matrix

const GROUP: i8 = 3;
const DELETE: i8 = 6;
const ALTER: i8 = 7;
const CLUSTER_ACTION: i8 = 9;
const DESCRIBE_CONFIGS: i8 = 10;
const ALTER_CONFIGS: i8 = 11;
const GROUP_AUTHORIZATION_FAILED: i16 = 30;
/// Pseudo codes for answers that refuse without an error code: the thing asked about
/// is left out of a list (ListGroups, OffsetFetch of all topics), or KIP-430's bits are
/// not what the grant gives (DescribeCluster, DescribeGroups).
const HIDDEN: i16 = -1000;
const WRONG_BITS: i16 = -1001;
/// A KIP-430 answer holding every operation the resource type supports (Kafka's
/// `AclEntry.supportedOperations`): what a super user is authorized for.
const ALL_BITS: i16 = -1002;
const GROUP_OPERATIONS: i32 = 1 << READ | 1 << DESCRIBE | 1 << DELETE;
const CLUSTER_OPERATIONS: i32 = 1 << 5 // CREATE
    | 1 << CLUSTER_ACTION
    | 1 << DESCRIBE_CONFIGS
    | 1 << ALTER_CONFIGS
    | 1 << 12 // IDEMPOTENT_WRITE
    | 1 << ALTER
    | 1 << DESCRIBE;
const SCRAM_SHA_256: i8 = 1;
const ADMIN: &str = "admin";
const ADMIN_PASSWORD: &str = "admin-secret";

/// An ALLOW ACL for `User:ANONYMOUS` (what a PLAINTEXT connection is) on a literal name.
fn anon(rt: i8, name: &str, op: i8) -> AclCreation {
    creation(rt, name, LITERAL, "User:ANONYMOUS", op, ALLOW)
}

/// A connection authenticated as `user` with SASL/PLAIN on a SASL_PLAINTEXT listener.
fn sasl_plain_client(addr: &str, user: &str, password: &str) -> crate::client::Client {
    use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
    let mut c = crate::client::Client::connect(addr);
    let hs = c.call(
        1,
        &SaslHandshakeRequest::default().with_mechanism(sb("PLAIN")),
    );
    assert_code!(hs.error_code, NONE, "SaslHandshake PLAIN");
    let token = format!("\0{user}\0{password}");
    let auth = c.call(
        2,
        &SaslAuthenticateRequest::default().with_auth_bytes(bytes::Bytes::from(token)),
    );
    assert_code!(auth.error_code, NONE, "SaslAuthenticate as {user}");
    c
}

/// The SCRAM-SHA-256 upsertion of `user` with `password` (RFC 5802's Hi).
fn scram_upsertion(
    user: &str,
    password: &str,
) -> kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion {
    let salt = b"matrix-salt";
    let iterations = 4096;
    let mut salted = [0u8; 32];
    pbkdf2::pbkdf2_hmac::<sha2::Sha256>(password.as_bytes(), salt, iterations, &mut salted);
    kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion::default()
        .with_name(sb(user))
        .with_mechanism(SCRAM_SHA_256)
        .with_iterations(iterations as i32)
        .with_salt(bytes::Bytes::copy_from_slice(salt))
        .with_salted_password(bytes::Bytes::copy_from_slice(&salted))
}

/// Calls `probe` until it answers `want` (ACL changes reach the authorizer through the
/// store's events, a moment after CreateAcls/DeleteAcls answer); the last answer.
fn eventually(
    c: &mut crate::client::Client,
    want: i16,
    probe: &dyn Fn(&mut crate::client::Client) -> i16,
) -> i16 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let got = probe(c);
        if got == want || std::time::Instant::now() > deadline {
            return got;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// One row: the API, the ACLs granted before both probes (`base`), the ACLs the API
/// needs on top (`needed`), the probe's code without them and with them, and as a
/// super user.
struct Row<'a> {
    api: &'static str,
    base: Vec<AclCreation>,
    needed: Vec<AclCreation>,
    refused: i16,
    granted: i16,
    /// What the probe answers for a super user, who holds no ACL at all.
    as_super: i16,
    probe: Box<dyn Fn(&mut crate::client::Client) -> i16 + 'a>,
}

#[test]
fn every_api_is_refused_without_its_acl_and_served_with_it_or_to_a_super_user() {
    use kafka_protocol::messages::*;
    if std::env::var("TERN_PROTOCOL_TARGET").is_ok() {
        return; // needs its own listeners, super user and a restart
    }
    let sasl_port = crate::broker::free_port();
    let listeners =
        format!("PLAINTEXT://127.0.0.1:{{port}},SASL_PLAINTEXT://127.0.0.1:{sasl_port}");
    let args = |supers: &str| -> Vec<String> {
        [
            "--listeners",
            &listeners,
            "--authorizer",
            "acl",
            "--super-users",
            supers,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    // Setup as a super user: a topic, a committed offset, the admin's credential.
    let setup = args("User:ANONYMOUS;User:admin");
    let setup: Vec<&str> = setup.iter().map(String::as_str).collect();
    let mut ctx = Ctx::with_args(&setup);
    let mut c = ctx.client();
    let topic = ctx.topic("aclmatrix", 1, &[]).name;
    let group = crate::broker::unique_name("aclmatrix-group");
    crate::groups::commit_ok(
        &ctx,
        &mut c,
        &group,
        crate::groups::SIMPLE,
        &[(topic.as_str(), 0, 7, -1, None)],
    );
    let created = c.call(
        0,
        &AlterUserScramCredentialsRequest::default()
            .with_upsertions(vec![scram_upsertion(ADMIN, ADMIN_PASSWORD)]),
    );
    assert_code!(created.results[0].error_code, NONE, "admin credential");
    // From now on only the admin is a super user; anonymous has what a row grants.
    let run = args("User:admin");
    let run: Vec<&str> = run.iter().map(String::as_str).collect();
    ctx.broker.set_args(&run);
    ctx.broker.restart();
    let mut admin = sasl_plain_client(&format!("127.0.0.1:{sasl_port}"), ADMIN, ADMIN_PASSWORD);
    let mut c = ctx.client();

    let t = topic.as_str();
    let g = group.as_str();
    let node = crate::broker::NODE_ID.to_string();
    let v = |key: ApiKey| ctx.max_version(key);
    let ofle_v = v(ApiKey::OffsetForLeaderEpoch);
    let ofle = move |replica_id: i32| {
        move |c: &mut crate::client::Client| {
            let r = c.call(
                ofle_v,
                &OffsetForLeaderEpochRequest::default()
                    .with_replica_id(BrokerId(replica_id))
                    .with_topics(vec![
                        offset_for_leader_epoch_request::OffsetForLeaderTopic::default()
                            .with_topic(tn(t))
                            .with_partitions(vec![
                                offset_for_leader_epoch_request::OffsetForLeaderPartition::default(
                                )
                                .with_partition(0)
                                .with_current_leader_epoch(-1)
                                .with_leader_epoch(0),
                            ]),
                    ]),
            );
            r.topics[0].partitions[0].error_code
        }
    };
    let describe_configs_v = v(ApiKey::DescribeConfigs);
    let describe_configs = move |rt: i8, name: String| {
        move |c: &mut crate::client::Client| {
            let r = c.call(
                describe_configs_v,
                &DescribeConfigsRequest::default().with_resources(vec![
                    describe_configs_request::DescribeConfigsResource::default()
                        .with_resource_type(rt)
                        .with_resource_name(sb(&name))
                        .with_configuration_keys(None),
                ]),
            );
            r.results[0].error_code
        }
    };
    let alter_configs_v = v(ApiKey::AlterConfigs);
    let alter_configs = move |rt: i8, name: String| {
        move |c: &mut crate::client::Client| {
            let r = c.call(
                alter_configs_v,
                &AlterConfigsRequest::default()
                    .with_validate_only(true)
                    .with_resources(vec![alter_configs_request::AlterConfigsResource::default()
                        .with_resource_type(rt)
                        .with_resource_name(sb(&name))]),
            );
            r.responses[0].error_code
        }
    };
    let incremental_v = v(ApiKey::IncrementalAlterConfigs);
    let incremental = move |rt: i8, name: String| {
        move |c: &mut crate::client::Client| {
            let r = c.call(
                incremental_v,
                &IncrementalAlterConfigsRequest::default()
                    .with_validate_only(true)
                    .with_resources(vec![
                        incremental_alter_configs_request::AlterConfigsResource::default()
                            .with_resource_type(rt)
                            .with_resource_name(sb(&name)),
                    ]),
            );
            r.responses[0].error_code
        }
    };
    let offset_fetch_v = v(ApiKey::OffsetFetch);
    // OffsetFetch of the named topic (v8+ groups form, or v2-7 single group).
    let offset_fetch = move |version: i16| {
        move |c: &mut crate::client::Client| {
            if version >= 8 {
                let r = c.call(
                    version,
                    &OffsetFetchRequest::default().with_groups(vec![
                        offset_fetch_request::OffsetFetchRequestGroup::default()
                            .with_group_id(crate::groups::gid(g))
                            .with_topics(Some(vec![
                                offset_fetch_request::OffsetFetchRequestTopics::default()
                                    .with_name(tn(t))
                                    .with_partition_indexes(vec![0]),
                            ])),
                    ]),
                );
                let group = &r.groups[0];
                if group.error_code != NONE {
                    return group.error_code;
                }
                let p = &group.topics[0].partitions[0];
                if p.error_code == NONE {
                    assert_eq!(p.committed_offset, 7, "the committed offset");
                }
                p.error_code
            } else {
                let r = c.call(
                    version,
                    &OffsetFetchRequest::default()
                        .with_group_id(crate::groups::gid(g))
                        .with_topics(Some(vec![
                            offset_fetch_request::OffsetFetchRequestTopic::default()
                                .with_name(tn(t))
                                .with_partition_indexes(vec![0]),
                        ])),
                );
                if r.error_code != NONE {
                    return r.error_code;
                }
                match r.topics.first().and_then(|x| x.partitions.first()) {
                    Some(p) => p.error_code,
                    None => HIDDEN,
                }
            }
        }
    };
    let offset_delete = move |c: &mut crate::client::Client| {
        let r = c.call(
            0,
            &OffsetDeleteRequest::default()
                .with_group_id(crate::groups::gid(g))
                .with_topics(vec![
                    offset_delete_request::OffsetDeleteRequestTopic::default()
                        .with_name(tn(t))
                        .with_partitions(vec![
                            offset_delete_request::OffsetDeleteRequestPartition::default()
                                .with_partition_index(0),
                        ]),
                ]),
        );
        if r.error_code != NONE {
            return r.error_code;
        }
        r.topics[0].partitions[0].error_code
    };
    let list_groups_v = v(ApiKey::ListGroups);
    let list_groups = move |c: &mut crate::client::Client| {
        let r = c.call(list_groups_v, &ListGroupsRequest::default());
        if r.error_code != NONE {
            return r.error_code;
        }
        if r.groups.iter().any(|l| l.group_id.as_str() == g) {
            NONE
        } else {
            HIDDEN
        }
    };

    let cluster = "kafka-cluster";
    let rows: Vec<Row> = vec![
        Row {
            api: "OffsetForLeaderEpoch (consumer, topic DESCRIBE)",
            base: vec![],
            needed: vec![anon(TOPIC, t, DESCRIBE)],
            refused: TOPIC_AUTHORIZATION_FAILED,
            granted: NONE,
            as_super: NONE,
            probe: Box::new(ofle(-1)),
        },
        Row {
            api: "OffsetForLeaderEpoch (follower, cluster CLUSTER_ACTION)",
            base: vec![],
            needed: vec![anon(CLUSTER, cluster, CLUSTER_ACTION)],
            refused: TOPIC_AUTHORIZATION_FAILED,
            granted: NONE,
            as_super: NONE,
            probe: Box::new(ofle(2)),
        },
        Row {
            api: "DeleteRecords (topic DELETE)",
            base: vec![],
            needed: vec![anon(TOPIC, t, DELETE)],
            refused: TOPIC_AUTHORIZATION_FAILED,
            granted: NONE,
            as_super: NONE,
            probe: Box::new(move |c: &mut crate::client::Client| {
                let r = c.call(
                    v(ApiKey::DeleteRecords),
                    &DeleteRecordsRequest::default()
                        .with_timeout_ms(5000)
                        .with_topics(vec![delete_records_request::DeleteRecordsTopic::default()
                            .with_name(tn(t))
                            .with_partitions(vec![
                                delete_records_request::DeleteRecordsPartition::default()
                                    .with_partition_index(0)
                                    .with_offset(-1),
                            ])]),
                );
                r.topics[0].partitions[0].error_code
            }),
        },
        Row {
            api: "CreatePartitions (topic ALTER)",
            base: vec![],
            needed: vec![anon(TOPIC, t, ALTER)],
            refused: TOPIC_AUTHORIZATION_FAILED,
            granted: NONE,
            as_super: NONE,
            probe: Box::new(move |c: &mut crate::client::Client| {
                let r = c.call(
                    v(ApiKey::CreatePartitions),
                    &CreatePartitionsRequest::default()
                        .with_timeout_ms(5000)
                        .with_validate_only(true)
                        .with_topics(vec![
                            create_partitions_request::CreatePartitionsTopic::default()
                                .with_name(tn(t))
                                .with_count(2)
                                .with_assignments(None),
                        ]),
                );
                r.results[0].error_code
            }),
        },
        Row {
            api: "DescribeConfigs topic (topic DESCRIBE_CONFIGS)",
            base: vec![],
            needed: vec![anon(TOPIC, t, DESCRIBE_CONFIGS)],
            refused: TOPIC_AUTHORIZATION_FAILED,
            granted: NONE,
            as_super: NONE,
            probe: Box::new(describe_configs(RESOURCE_TOPIC, t.to_string())),
        },
        Row {
            api: "DescribeConfigs broker (cluster DESCRIBE_CONFIGS)",
            base: vec![],
            needed: vec![anon(CLUSTER, cluster, DESCRIBE_CONFIGS)],
            refused: CLUSTER_AUTHORIZATION_FAILED,
            granted: NONE,
            as_super: NONE,
            probe: Box::new(describe_configs(RESOURCE_BROKER, node.clone())),
        },
        Row {
            api: "DescribeConfigs v0 topic (legacy codec)",
            base: vec![],
            needed: vec![anon(TOPIC, t, DESCRIBE_CONFIGS)],
            refused: TOPIC_AUTHORIZATION_FAILED,
            granted: NONE,
            as_super: NONE,
            probe: Box::new(move |c: &mut crate::client::Client| {
                let body = crate::legacy::describe_configs_v0(RESOURCE_TOPIC, t, None);
                let r = crate::legacy::call_raw(c, ApiKey::DescribeConfigs, 0, &body);
                crate::legacy::parse_describe_configs_v0(r, t).0
            }),
        },
        Row {
            api: "AlterConfigs topic (topic ALTER_CONFIGS)",
            base: vec![],
            needed: vec![anon(TOPIC, t, ALTER_CONFIGS)],
            refused: TOPIC_AUTHORIZATION_FAILED,
            granted: NONE,
            as_super: NONE,
            probe: Box::new(alter_configs(RESOURCE_TOPIC, t.to_string())),
        },
        Row {
            api: "AlterConfigs broker (cluster ALTER_CONFIGS)",
            base: vec![],
            needed: vec![anon(CLUSTER, cluster, ALTER_CONFIGS)],
            refused: CLUSTER_AUTHORIZATION_FAILED,
            granted: NONE,
            as_super: NONE,
            probe: Box::new(alter_configs(RESOURCE_BROKER, node.clone())),
        },
        Row {
            api: "IncrementalAlterConfigs topic (topic ALTER_CONFIGS)",
            base: vec![],
            needed: vec![anon(TOPIC, t, ALTER_CONFIGS)],
            refused: TOPIC_AUTHORIZATION_FAILED,
            granted: NONE,
            as_super: NONE,
            probe: Box::new(incremental(RESOURCE_TOPIC, t.to_string())),
        },
        Row {
            api: "IncrementalAlterConfigs broker (cluster ALTER_CONFIGS)",
            base: vec![],
            needed: vec![anon(CLUSTER, cluster, ALTER_CONFIGS)],
            refused: CLUSTER_AUTHORIZATION_FAILED,
            granted: NONE,
            as_super: NONE,
            probe: Box::new(incremental(RESOURCE_BROKER, node.clone())),
        },
        Row {
            api: "DescribeLogDirs (cluster DESCRIBE)",
            base: vec![],
            needed: vec![anon(CLUSTER, cluster, DESCRIBE)],
            refused: CLUSTER_AUTHORIZATION_FAILED,
            granted: NONE,
            as_super: NONE,
            probe: Box::new(move |c: &mut crate::client::Client| {
                let r = c.call(
                    v(ApiKey::DescribeLogDirs),
                    &DescribeLogDirsRequest::default().with_topics(None),
                );
                if r.error_code == NONE && r.results.is_empty() {
                    return HIDDEN;
                }
                if r.error_code != NONE {
                    assert!(
                        r.results.is_empty(),
                        "a refused DescribeLogDirs lists no dirs"
                    );
                }
                r.error_code
            }),
        },
        Row {
            api: "ElectLeaders (cluster ALTER)",
            base: vec![],
            needed: vec![anon(CLUSTER, cluster, ALTER)],
            refused: CLUSTER_AUTHORIZATION_FAILED,
            granted: NONE,
            as_super: NONE,
            probe: Box::new(move |c: &mut crate::client::Client| {
                let r = c.call(
                    v(ApiKey::ElectLeaders),
                    &ElectLeadersRequest::default()
                        .with_timeout_ms(5000)
                        .with_topic_partitions(Some(vec![
                            elect_leaders_request::TopicPartitions::default()
                                .with_topic(tn(t))
                                .with_partitions(vec![0]),
                        ])),
                );
                let partition = r.replica_election_results[0].partition_result[0].error_code;
                if r.error_code == CLUSTER_AUTHORIZATION_FAILED {
                    assert_code!(
                        partition,
                        CLUSTER_AUTHORIZATION_FAILED,
                        "refused ElectLeaders' partition"
                    );
                }
                r.error_code
            }),
        },
        Row {
            api: "AlterPartitionReassignments (cluster ALTER)",
            base: vec![],
            needed: vec![anon(CLUSTER, cluster, ALTER)],
            refused: CLUSTER_AUTHORIZATION_FAILED,
            granted: NONE,
            as_super: NONE,
            probe: Box::new(move |c: &mut crate::client::Client| {
                let r = c.call(
                    0,
                    &AlterPartitionReassignmentsRequest::default().with_timeout_ms(5000).with_topics(vec![
                        alter_partition_reassignments_request::ReassignableTopic::default()
                            .with_name(tn(t))
                            .with_partitions(vec![
                                alter_partition_reassignments_request::ReassignablePartition::default()
                                    .with_partition_index(0)
                                    .with_replicas(None),
                            ]),
                    ]),
                );
                r.error_code
            }),
        },
        Row {
            api: "ListPartitionReassignments (cluster DESCRIBE)",
            base: vec![],
            needed: vec![anon(CLUSTER, cluster, DESCRIBE)],
            refused: CLUSTER_AUTHORIZATION_FAILED,
            granted: NONE,
            as_super: NONE,
            probe: Box::new(move |c: &mut crate::client::Client| {
                c.call(
                    0,
                    &ListPartitionReassignmentsRequest::default()
                        .with_timeout_ms(5000)
                        .with_topics(None),
                )
                .error_code
            }),
        },
        Row {
            api: "OffsetFetch v8+ (group DESCRIBE)",
            base: vec![anon(TOPIC, t, DESCRIBE)],
            needed: vec![anon(GROUP, g, DESCRIBE)],
            refused: GROUP_AUTHORIZATION_FAILED,
            granted: NONE,
            as_super: NONE,
            probe: Box::new(offset_fetch(offset_fetch_v)),
        },
        Row {
            api: "OffsetFetch v8+ named topic (topic DESCRIBE)",
            base: vec![anon(GROUP, g, DESCRIBE)],
            needed: vec![anon(TOPIC, t, DESCRIBE)],
            refused: TOPIC_AUTHORIZATION_FAILED,
            granted: NONE,
            as_super: NONE,
            probe: Box::new(offset_fetch(offset_fetch_v)),
        },
        Row {
            api: "OffsetFetch v1 (group DESCRIBE, on the partition: v0-1 have no top-level code)",
            base: vec![anon(TOPIC, t, DESCRIBE)],
            needed: vec![anon(GROUP, g, DESCRIBE)],
            refused: GROUP_AUTHORIZATION_FAILED,
            granted: NONE,
            as_super: NONE,
            probe: Box::new(offset_fetch(1)),
        },
        Row {
            api: "OffsetFetch v7 (group DESCRIBE, top-level code)",
            base: vec![anon(TOPIC, t, DESCRIBE)],
            needed: vec![anon(GROUP, g, DESCRIBE)],
            refused: GROUP_AUTHORIZATION_FAILED,
            granted: NONE,
            as_super: NONE,
            probe: Box::new(offset_fetch(7)),
        },
        Row {
            api: "OffsetFetch v7 named topic (topic DESCRIBE)",
            base: vec![anon(GROUP, g, DESCRIBE)],
            needed: vec![anon(TOPIC, t, DESCRIBE)],
            refused: TOPIC_AUTHORIZATION_FAILED,
            granted: NONE,
            as_super: NONE,
            probe: Box::new(offset_fetch(7)),
        },
        Row {
            api: "OffsetFetch v8+ all topics (undescribable ones left out)",
            base: vec![anon(GROUP, g, DESCRIBE)],
            needed: vec![anon(TOPIC, t, DESCRIBE)],
            refused: HIDDEN,
            granted: NONE,
            as_super: NONE,
            probe: Box::new(move |c: &mut crate::client::Client| {
                let r = c.call(
                    offset_fetch_v,
                    &OffsetFetchRequest::default().with_groups(vec![
                        offset_fetch_request::OffsetFetchRequestGroup::default()
                            .with_group_id(crate::groups::gid(g))
                            .with_topics(None),
                    ]),
                );
                let group = &r.groups[0];
                if group.error_code != NONE {
                    return group.error_code;
                }
                if group.topics.iter().any(|x| x.name.0.as_str() == t) {
                    NONE
                } else {
                    HIDDEN
                }
            }),
        },
        Row {
            api: "DescribeGroups (group DESCRIBE, KIP-430 bits)",
            base: vec![],
            needed: vec![anon(GROUP, g, DESCRIBE)],
            refused: GROUP_AUTHORIZATION_FAILED,
            granted: NONE,
            as_super: ALL_BITS,
            probe: Box::new(move |c: &mut crate::client::Client| {
                let r = c.call(
                    5,
                    &DescribeGroupsRequest::default()
                        .with_groups(vec![crate::groups::gid(g)])
                        .with_include_authorized_operations(true),
                );
                let d = &r.groups[0];
                if d.error_code != NONE {
                    return d.error_code;
                }
                match d.authorized_operations {
                    bits if bits == 1 << DESCRIBE => NONE,
                    GROUP_OPERATIONS => ALL_BITS,
                    _ => WRONG_BITS,
                }
            }),
        },
        Row {
            api: "ListGroups (group DESCRIBE)",
            base: vec![],
            needed: vec![anon(GROUP, g, DESCRIBE)],
            refused: HIDDEN,
            granted: NONE,
            as_super: NONE,
            probe: Box::new(list_groups),
        },
        Row {
            api: "ListGroups (cluster DESCRIBE lists every group)",
            base: vec![],
            needed: vec![anon(CLUSTER, cluster, DESCRIBE)],
            refused: HIDDEN,
            granted: NONE,
            as_super: NONE,
            probe: Box::new(list_groups),
        },
        Row {
            api: "DescribeCluster (KIP-430 bits need cluster DESCRIBE)",
            base: vec![],
            needed: vec![anon(CLUSTER, cluster, DESCRIBE)],
            refused: WRONG_BITS,
            granted: NONE,
            as_super: ALL_BITS,
            probe: Box::new(move |c: &mut crate::client::Client| {
                let r = c.call(
                    v(ApiKey::DescribeCluster),
                    &crate::ops::describe_cluster_req(0)
                        .with_include_cluster_authorized_operations(true),
                );
                if r.error_code != NONE {
                    return r.error_code;
                }
                match r.cluster_authorized_operations {
                    0 => WRONG_BITS,
                    bits if bits == 1 << DESCRIBE => NONE,
                    CLUSTER_OPERATIONS => ALL_BITS,
                    _ => WRONG_BITS - 1,
                }
            }),
        },
        Row {
            api: "DescribeUserScramCredentials (cluster DESCRIBE)",
            base: vec![],
            needed: vec![anon(CLUSTER, cluster, DESCRIBE)],
            refused: CLUSTER_AUTHORIZATION_FAILED,
            granted: NONE,
            as_super: NONE,
            probe: Box::new(move |c: &mut crate::client::Client| {
                c.call(
                    0,
                    &DescribeUserScramCredentialsRequest::default().with_users(None),
                )
                .error_code
            }),
        },
        Row {
            api: "AlterUserScramCredentials (cluster ALTER)",
            base: vec![],
            needed: vec![anon(CLUSTER, cluster, ALTER)],
            refused: CLUSTER_AUTHORIZATION_FAILED,
            // Deleting a credential nobody has: allowed, and then not found.
            granted: RESOURCE_NOT_FOUND,
            as_super: RESOURCE_NOT_FOUND,
            probe: Box::new(move |c: &mut crate::client::Client| {
                let r = c.call(
                    0,
                    &AlterUserScramCredentialsRequest::default().with_deletions(vec![
                        alter_user_scram_credentials_request::ScramCredentialDeletion::default()
                            .with_name(sb("nobody"))
                            .with_mechanism(SCRAM_SHA_256),
                    ]),
                );
                assert_eq!(r.results[0].user.as_str(), "nobody");
                r.results[0].error_code
            }),
        },
        // Last: a granted OffsetDelete removes the commit the OffsetFetch rows read.
        Row {
            api: "OffsetDelete (group DELETE)",
            base: vec![anon(TOPIC, t, READ)],
            needed: vec![anon(GROUP, g, DELETE)],
            refused: GROUP_AUTHORIZATION_FAILED,
            granted: NONE,
            as_super: NONE,
            probe: Box::new(offset_delete),
        },
        Row {
            api: "OffsetDelete topic (topic READ)",
            base: vec![anon(GROUP, g, DELETE)],
            needed: vec![anon(TOPIC, t, READ)],
            refused: TOPIC_AUTHORIZATION_FAILED,
            granted: NONE,
            as_super: NONE,
            probe: Box::new(offset_delete),
        },
    ];

    let grant = |admin: &mut crate::client::Client, acls: &[AclCreation], what: &str| {
        if acls.is_empty() {
            return;
        }
        let r = admin.call(
            3,
            &CreateAclsRequest::default().with_creations(acls.to_vec()),
        );
        assert!(
            r.results.iter().all(|x| x.error_code == NONE),
            "{what}: CreateAcls {r:?}"
        );
    };
    let mut failures = Vec::new();
    for row in &rows {
        grant(&mut admin, &row.base, row.api);
        let got = eventually(&mut c, row.refused, row.probe.as_ref());
        if got != row.refused {
            failures.push(format!(
                "{}: without its ACL answered {} (want {})",
                row.api,
                ename(got),
                ename(row.refused)
            ));
        }
        grant(&mut admin, &row.needed, row.api);
        let got = eventually(&mut c, row.granted, row.probe.as_ref());
        if got != row.granted {
            failures.push(format!(
                "{}: with its ACL answered {} (want {})",
                row.api,
                ename(got),
                ename(row.granted)
            ));
        }
        // The super user gets through without any ACL of its own.
        let got = (row.probe)(&mut admin);
        if got != row.as_super {
            failures.push(format!(
                "{}: as a super user answered {} (want {})",
                row.api,
                ename(got),
                ename(row.as_super)
            ));
        }
        // Revoke everything anonymous has, for the next row.
        let r = admin.call(
            3,
            &DeleteAclsRequest::default().with_filters(vec![
                any_filter().with_principal_filter(Some(sb("User:ANONYMOUS")))
            ]),
        );
        assert_code!(
            r.filter_results[0].error_code,
            NONE,
            "{}: DeleteAcls",
            row.api
        );
    }
    assert!(failures.is_empty(), "ACL matrix:\n{}", failures.join("\n"));
}

// ------------------------------------------- a principal without ACLs, every API

/// `needle` occurs in `haystack`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn a_principal_without_acls_gets_nothing_from_any_advertised_api() {
    use crate::client::{api_name, Outcome};
    use kafka_protocol::messages::*;
    use std::time::Duration;
    if std::env::var("TERN_PROTOCOL_TARGET").is_ok() {
        return; // needs its own listeners and super user
    }
    let sasl_port = crate::broker::free_port();
    let listeners =
        format!("PLAINTEXT://127.0.0.1:{{port}},SASL_PLAINTEXT://127.0.0.1:{sasl_port}");
    let ctx = Ctx::with_args(&[
        "--listeners",
        &listeners,
        "--authorizer",
        "acl",
        "--super-users",
        "User:ANONYMOUS",
    ]);
    // As the super user: the topic every sample request names, holding one record, and
    // a second topic no request names; the user `nobody`, who gets no ACL.
    let mut admin = ctx.client();
    let named = ctx.topic("noacl-named", 1, &[]);
    let secret = ctx.topic("noacl-secret", 1, &[]);
    let payload: &[u8] = b"noacl-payload-0123456789";
    produce_ok(
        &ctx,
        &mut admin,
        &named,
        0,
        crate::records::simple_batch(now_ms(), &[payload]),
    );
    let created = admin.call(
        0,
        &AlterUserScramCredentialsRequest::default()
            .with_upsertions(vec![scram_upsertion("nobody", "nobody-secret")]),
    );
    assert_code!(created.results[0].error_code, NONE, "nobody's credential");
    let login = || sasl_plain_client(&format!("127.0.0.1:{sasl_port}"), "nobody", "nobody-secret");
    let exempt = [
        ApiKey::ApiVersions,
        ApiKey::SaslHandshake,
        ApiKey::SaslAuthenticate,
    ]
    .map(|k| k as i16);
    let mut leaks = Vec::new();
    let mut sent = 0;
    let mut c = login();
    for (&key, &(_, max)) in &ctx.apis {
        if exempt.contains(&key) {
            continue;
        }
        let body = crate::t_hostile::sample_body(key, max, &named)
            .unwrap_or_else(|| panic!("no sample body for {} v{max}", api_name(key)));
        c.send_raw(key, max, &body);
        sent += 1;
        match c.wait_outcome(Duration::from_secs(10)) {
            Outcome::Frame(frame) => {
                for (what, needle) in [
                    ("the undescribable topic's name", secret.name.as_bytes()),
                    ("the named topic's record", payload),
                ] {
                    if contains(&frame, needle) {
                        leaks.push(format!("{} v{max} answered {what}", api_name(key)));
                    }
                }
            }
            // A refusal may close the connection (Kafka closes on some): log in again.
            Outcome::Closed => c = login(),
            Outcome::Timeout => panic!("{} v{max}: no answer within 10 s", api_name(key)),
        }
    }
    // Metadata of every topic, and ListGroups, hide everything too.
    let all = c.call(
        ctx.max_version(ApiKey::Metadata),
        &metadata_req(ctx.max_version(ApiKey::Metadata), None, false),
    );
    assert!(
        all.topics.is_empty(),
        "Metadata of all topics: {:?}",
        all.topics
    );
    assert!(
        leaks.is_empty(),
        "leaked to a principal without ACLs:\n{}",
        leaks.join("\n")
    );
    // Nothing changed: the record is still the only one, the topics are both there,
    // no group was made, no ACL was created.
    assert_eq!(
        offset_for(&ctx, &mut admin, &named.name, 0, LATEST),
        1,
        "nothing was appended"
    );
    let topics = admin.call(1, &metadata_req(1, None, false));
    for t in [&named, &secret] {
        assert!(
            topics
                .topics
                .iter()
                .any(|x| x.name.as_ref().map(|n| n.as_str()) == Some(t.name.as_str())),
            "{} still exists",
            t.name
        );
    }
    let groups = admin.call(
        ctx.max_version(ApiKey::ListGroups),
        &ListGroupsRequest::default(),
    );
    assert!(
        groups
            .groups
            .iter()
            .all(|g| g.group_id.as_str() != crate::t_hostile::HOSTILE_GROUP),
        "no group was made: {:?}",
        groups.groups
    );
    let acls = admin.call(3, &describe_all(3));
    assert!(
        acls.resources.is_empty(),
        "no ACL was made: {:?}",
        acls.resources
    );
    assert!(sent > 30, "every advertised API was sent ({sent})");
}
