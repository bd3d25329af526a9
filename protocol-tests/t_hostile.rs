//! Hostile request bodies and frames. The broker must answer or close — never abort,
//! hang the process, or reserve memory from attacker-claimed lengths — and keep serving.
//!
//! kafka-protocol 0.18 decoders call `Vec::with_capacity(claimed_len)`, so e.g. a
//! Metadata v1 body of `7f ff ff ff` makes a naive broker try to allocate ~2^31 topics.

use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kafka_protocol::messages::*;
use kafka_protocol::protocol::Encodable;

use crate::broker::now_ms;
use crate::client::{
    api_name, encode_header, frame, frame_correlation_id, is_flexible, wait_outcome, Outcome,
    CLIENT_ID,
};
use crate::ops::*;
use crate::records::{batch_of, magic1_message_set, Prng};

const CASE_TIMEOUT: Duration = Duration::from_secs(2);
const PHASE_BUDGET: Duration = Duration::from_secs(90);
const WORKERS: usize = 4;
const POSITIONS_PER_VERSION: usize = 16;
/// The group the hostile samples address (nobody joins it for real).
pub(crate) const HOSTILE_GROUP: &str = "hostile-group";

#[derive(Debug, Clone)]
struct Case {
    api: i16,
    version: i16,
    desc: String,
    corr: i32,
    /// Whole frame payload (header + body), without the size prefix.
    payload: Vec<u8>,
    /// The header itself is valid, so any response must carry `corr`.
    header_valid: bool,
}

fn enc<R: Encodable>(r: &R, v: i16) -> Option<Vec<u8>> {
    let mut b = bytes::BytesMut::new();
    r.encode(&mut b, v).ok().map(|_| b.to_vec())
}

/// A valid, harmless request body for (api, v), if we know how to build one.
pub(crate) fn sample_body(api: i16, v: i16, topic: &Topic) -> Option<Vec<u8>> {
    let key = ApiKey::try_from(api).ok()?;
    let ghost = "hostile-ghost-topic";
    if v < key.valid_versions().min {
        // Versions the codec lacks (Kafka 3.9's, KIP-896), hand-encoded.
        if let Some(body) = crate::legacy::sample(key, v, &topic.name, HOSTILE_GROUP) {
            return Some(body);
        }
    }
    match key {
        ApiKey::ApiVersions => enc(&api_versions_req(v.min(4)), v),
        ApiKey::Metadata => enc(&metadata_req(v, Some(&[&topic.name]), false), v),
        ApiKey::Produce if v >= 3 => enc(&produce_req(v, topic, 0, batch_of(2, now_ms()), 1), v),
        ApiKey::Produce => {
            // v0-2 layout, magic-1 message set.
            let ms = magic1_message_set(now_ms(), None, b"x");
            let mut b = Vec::new();
            b.extend_from_slice(&1i16.to_be_bytes());
            b.extend_from_slice(&1000i32.to_be_bytes());
            b.extend_from_slice(&1i32.to_be_bytes());
            b.extend_from_slice(&(topic.name.len() as i16).to_be_bytes());
            b.extend_from_slice(topic.name.as_bytes());
            b.extend_from_slice(&1i32.to_be_bytes());
            b.extend_from_slice(&0i32.to_be_bytes());
            b.extend_from_slice(&(ms.len() as i32).to_be_bytes());
            b.extend_from_slice(&ms);
            Some(b)
        }
        ApiKey::Fetch => enc(&fetch_req(v, topic, 0, FetchOpts::at(0)), v),
        ApiKey::ListOffsets => enc(&list_offsets_req(v, &topic.name, 0, LATEST), v),
        ApiKey::InitProducerId => enc(
            &InitProducerIdRequest::default()
                .with_transactional_id(None)
                .with_transaction_timeout_ms(1000),
            v,
        ),
        ApiKey::CreateTopics => enc(
            &create_topics_req(
                vec![creatable("hostile-ct", 1, 1, &[("retention.ms", "1000")])],
                true,
            ),
            v,
        ),
        ApiKey::DeleteTopics => {
            let mut r = DeleteTopicsRequest::default().with_timeout_ms(1000);
            if v >= 6 {
                r = r
                    .with_topics(vec![delete_topics_request::DeleteTopicState::default()
                        .with_name(Some(tn(ghost)))]);
            } else {
                r = r.with_topic_names(vec![tn(ghost)]);
            }
            enc(&r, v)
        }
        ApiKey::DescribeLogDirs => enc(
            &kafka_protocol::messages::DescribeLogDirsRequest::default().with_topics(Some(vec![
                kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic::default()
                    .with_topic(tn(&topic.name))
                    .with_partitions(vec![0]),
            ])),
            v,
        ),
        ApiKey::ElectLeaders => enc(
            &kafka_protocol::messages::ElectLeadersRequest::default()
                .with_election_type(0)
                .with_timeout_ms(1000)
                .with_topic_partitions(Some(vec![
                    kafka_protocol::messages::elect_leaders_request::TopicPartitions::default()
                        .with_topic(tn(&topic.name))
                        .with_partitions(vec![0]),
                ])),
            v,
        ),
        ApiKey::AlterPartitionReassignments => enc(
            &kafka_protocol::messages::AlterPartitionReassignmentsRequest::default()
                .with_timeout_ms(1000)
                .with_topics(vec![
                    kafka_protocol::messages::alter_partition_reassignments_request::ReassignableTopic::default()
                        .with_name(tn(ghost))
                        .with_partitions(vec![
                            kafka_protocol::messages::alter_partition_reassignments_request::ReassignablePartition::default()
                                .with_partition_index(0)
                                .with_replicas(Some(vec![kafka_protocol::messages::BrokerId(1)])),
                        ]),
                ]),
            v,
        ),
        ApiKey::ListPartitionReassignments => enc(
            &kafka_protocol::messages::ListPartitionReassignmentsRequest::default()
                .with_timeout_ms(1000)
                .with_topics(None),
            v,
        ),
        ApiKey::CreatePartitions => enc(
            &CreatePartitionsRequest::default()
                .with_timeout_ms(1000)
                .with_validate_only(true)
                .with_topics(vec![
                    create_partitions_request::CreatePartitionsTopic::default()
                        .with_name(tn(ghost))
                        .with_count(2)
                        .with_assignments(None),
                ]),
            v,
        ),
        ApiKey::DeleteRecords => enc(
            &DeleteRecordsRequest::default()
                .with_timeout_ms(1000)
                .with_topics(vec![delete_records_request::DeleteRecordsTopic::default()
                    .with_name(tn(ghost))
                    .with_partitions(vec![
                        delete_records_request::DeleteRecordsPartition::default()
                            .with_partition_index(0)
                            .with_offset(0),
                    ])]),
            v,
        ),
        ApiKey::OffsetForLeaderEpoch => enc(&offset_for_leader_epoch_req(&topic.name, 0, -1, 0), v),
        ApiKey::DescribeConfigs => enc(
            &DescribeConfigsRequest::default().with_resources(vec![
                describe_configs_request::DescribeConfigsResource::default()
                    .with_resource_type(RESOURCE_TOPIC)
                    .with_resource_name(sb(&topic.name))
                    .with_configuration_keys(Some(vec![sb("retention.ms")])),
            ]),
            v,
        ),
        ApiKey::AlterConfigs => enc(
            &AlterConfigsRequest::default()
                .with_validate_only(true)
                .with_resources(vec![alter_configs_request::AlterConfigsResource::default()
                    .with_resource_type(RESOURCE_TOPIC)
                    .with_resource_name(sb(ghost))
                    .with_configs(vec![alter_configs_request::AlterableConfig::default()
                        .with_name(sb("retention.ms"))
                        .with_value(Some(sb("1000")))])]),
            v,
        ),
        ApiKey::IncrementalAlterConfigs => enc(
            &IncrementalAlterConfigsRequest::default()
                .with_validate_only(true)
                .with_resources(vec![
                    incremental_alter_configs_request::AlterConfigsResource::default()
                        .with_resource_type(RESOURCE_TOPIC)
                        .with_resource_name(sb(ghost))
                        .with_configs(vec![
                            incremental_alter_configs_request::AlterableConfig::default()
                                .with_name(sb("retention.ms"))
                                .with_config_operation(OP_SET)
                                .with_value(Some(sb("1000"))),
                        ]),
                ]),
            v,
        ),
        ApiKey::DescribeCluster => enc(&describe_cluster_req(v), v),
        // Group APIs. The samples must not park: an invalid session timeout answers a
        // JoinGroup at once, and the other requests name groups nobody joins.
        ApiKey::FindCoordinator => {
            let mut r = FindCoordinatorRequest::default();
            if v >= 4 {
                r = r.with_coordinator_keys(vec![sb(HOSTILE_GROUP), sb("hostile-g2")]);
            } else {
                r = r.with_key(sb(HOSTILE_GROUP));
            }
            enc(&r, v)
        }
        ApiKey::JoinGroup => {
            let mut spec = crate::groups::JoinSpec::consumer(HOSTILE_GROUP, &[&topic.name])
                .session(1)
                .rebalance(1);
            if v >= 5 {
                spec = spec.instance("hostile-instance");
            }
            enc(&crate::groups::join_req(v, &spec), v)
        }
        ApiKey::SyncGroup => enc(
            &crate::groups::sync_req(
                v,
                HOSTILE_GROUP,
                1,
                "hostile-member",
                if v >= 3 {
                    Some("hostile-instance")
                } else {
                    None
                },
                Some(("consumer", "range")),
                &[(
                    "hostile-member",
                    crate::groups::assignment(&[(&topic.name, &[0])]),
                )],
            ),
            v,
        ),
        ApiKey::Heartbeat => enc(
            &HeartbeatRequest::default()
                .with_group_id(crate::groups::gid(HOSTILE_GROUP))
                .with_generation_id(1)
                .with_member_id(sb("hostile-member")),
            v,
        ),
        ApiKey::LeaveGroup => {
            let mut r =
                LeaveGroupRequest::default().with_group_id(crate::groups::gid(HOSTILE_GROUP));
            if v >= 3 {
                r = r.with_members(vec![
                    leave_group_request::MemberIdentity::default()
                        .with_member_id(sb("hostile-member")),
                    leave_group_request::MemberIdentity::default()
                        .with_member_id(sb(""))
                        .with_group_instance_id(Some(sb("hostile-instance"))),
                ]);
            } else {
                r = r.with_member_id(sb("hostile-member"));
            }
            enc(&r, v)
        }
        ApiKey::OffsetCommit => enc(
            &crate::groups::commit_req(
                v,
                HOSTILE_GROUP,
                crate::groups::SIMPLE,
                &[
                    (&topic.name, 0, 1, 0, Some("hostile")),
                    (ghost, 0, 1, 0, None),
                ],
            ),
            v,
        ),
        ApiKey::OffsetFetch => {
            let mut r = OffsetFetchRequest::default();
            if v >= 8 {
                r = r.with_groups(vec![
                    offset_fetch_request::OffsetFetchRequestGroup::default()
                        .with_group_id(crate::groups::gid(HOSTILE_GROUP))
                        .with_topics(Some(vec![
                            offset_fetch_request::OffsetFetchRequestTopics::default()
                                .with_name(tn(&topic.name))
                                .with_partition_indexes(vec![0, 1]),
                        ])),
                    offset_fetch_request::OffsetFetchRequestGroup::default()
                        .with_group_id(crate::groups::gid("hostile-g2"))
                        .with_topics(None),
                ]);
            } else {
                r = r
                    .with_group_id(crate::groups::gid(HOSTILE_GROUP))
                    .with_topics(Some(vec![
                        offset_fetch_request::OffsetFetchRequestTopic::default()
                            .with_name(tn(&topic.name))
                            .with_partition_indexes(vec![0, 1]),
                    ]));
            }
            enc(&r, v)
        }
        ApiKey::DescribeGroups => enc(
            &DescribeGroupsRequest::default().with_groups(vec![
                crate::groups::gid(HOSTILE_GROUP),
                crate::groups::gid("hostile-g2"),
            ]),
            v,
        ),
        ApiKey::ListGroups => {
            let mut r = ListGroupsRequest::default();
            if v >= 4 {
                r = r.with_states_filter(vec![sb("Stable"), sb("Empty")]);
            }
            if v >= 5 {
                r = r.with_types_filter(vec![sb("classic")]);
            }
            enc(&r, v)
        }
        ApiKey::DeleteGroups => enc(
            &DeleteGroupsRequest::default()
                .with_groups_names(vec![crate::groups::gid("hostile-ghost-group")]),
            v,
        ),
        ApiKey::DescribeAcls => enc(
            &DescribeAclsRequest::default()
                .with_resource_type_filter(1)
                .with_pattern_type_filter(1)
                .with_operation(1)
                .with_permission_type(1),
            v,
        ),
        ApiKey::CreateAcls => enc(
            &CreateAclsRequest::default().with_creations(vec![
                create_acls_request::AclCreation::default()
                    .with_resource_type(2)
                    .with_resource_name(sb("hostile-acl"))
                    .with_resource_pattern_type(3)
                    .with_principal(sb("User:hostile"))
                    .with_host(sb("*"))
                    .with_operation(3)
                    .with_permission_type(3),
            ]),
            v,
        ),
        ApiKey::DeleteAcls => enc(
            &DeleteAclsRequest::default().with_filters(vec![
                delete_acls_request::DeleteAclsFilter::default()
                    .with_resource_type_filter(2)
                    .with_resource_name_filter(Some(sb("hostile-acl")))
                    .with_pattern_type_filter(3)
                    .with_principal_filter(None)
                    .with_host_filter(None)
                    .with_operation(3)
                    .with_permission_type(3),
            ]),
            v,
        ),
        ApiKey::DescribeClientQuotas => enc(
            &DescribeClientQuotasRequest::default().with_components(vec![
                describe_client_quotas_request::ComponentData::default()
                    .with_entity_type(sb("client-id"))
                    .with_match_type(0)
                    .with_match(Some(sb("hostile-client"))),
            ]),
            v,
        ),
        ApiKey::AlterClientQuotas => enc(
            &AlterClientQuotasRequest::default().with_entries(vec![
                alter_client_quotas_request::EntryData::default()
                    .with_entity(vec![alter_client_quotas_request::EntityData::default()
                        .with_entity_type(sb("client-id"))
                        .with_entity_name(Some(sb("hostile-client")))])
                    .with_ops(vec![alter_client_quotas_request::OpData::default()
                        .with_key(sb("producer_byte_rate"))
                        .with_remove(true)]),
            ]),
            v,
        ),
        ApiKey::SaslHandshake => enc(
            &kafka_protocol::messages::SaslHandshakeRequest::default().with_mechanism(sb("PLAIN")),
            v,
        ),
        ApiKey::SaslAuthenticate => enc(
            &kafka_protocol::messages::SaslAuthenticateRequest::default()
                .with_auth_bytes(bytes::Bytes::from_static(b"\0hostile\0pw")),
            v,
        ),
        ApiKey::DescribeUserScramCredentials => enc(
            &kafka_protocol::messages::DescribeUserScramCredentialsRequest::default().with_users(None),
            v,
        ),
        ApiKey::AlterUserScramCredentials => enc(
            &kafka_protocol::messages::AlterUserScramCredentialsRequest::default().with_deletions(vec![
                kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialDeletion::default()
                    .with_name(sb("hostile-user"))
                    .with_mechanism(1),
            ]),
            v,
        ),
        ApiKey::ConsumerGroupHeartbeat => enc(
            &ConsumerGroupHeartbeatRequest::default()
                .with_group_id(crate::groups::gid("hostile-consumer-group"))
                .with_member_id(sb("hostile-member-0000000000"))
                .with_member_epoch(0)
                .with_rebalance_timeout_ms(30_000)
                .with_subscribed_topic_names(Some(vec![tn(&topic.name)]))
                .with_topic_partitions(Some(vec![])),
            v,
        ),
        ApiKey::ConsumerGroupDescribe => enc(
            &ConsumerGroupDescribeRequest::default()
                .with_group_ids(vec![crate::groups::gid("hostile-consumer-group")])
                .with_include_authorized_operations(true),
            v,
        ),
        ApiKey::OffsetDelete => enc(
            &OffsetDeleteRequest::default()
                .with_group_id(crate::groups::gid(HOSTILE_GROUP))
                .with_topics(vec![
                    offset_delete_request::OffsetDeleteRequestTopic::default()
                        .with_name(tn(&topic.name))
                        .with_partitions(vec![
                            offset_delete_request::OffsetDeleteRequestPartition::default()
                                .with_partition_index(0),
                        ]),
                ]),
            v,
        ),
        ApiKey::AddPartitionsToTxn if v >= 4 => enc(
            &AddPartitionsToTxnRequest::default().with_transactions(vec![
                add_partitions_to_txn_request::AddPartitionsToTxnTransaction::default()
                    .with_transactional_id(TransactionalId(sb("hostile-txn")))
                    .with_producer_id(ProducerId(1))
                    .with_verify_only(true)
                    .with_topics(vec![hostile_txn_topic(topic)]),
            ]),
            v,
        ),
        ApiKey::AddPartitionsToTxn => enc(
            &AddPartitionsToTxnRequest::default()
                .with_v3_and_below_transactional_id(TransactionalId(sb("hostile-txn")))
                .with_v3_and_below_producer_id(ProducerId(1))
                .with_v3_and_below_topics(vec![hostile_txn_topic(topic)]),
            v,
        ),
        ApiKey::AddOffsetsToTxn => enc(
            &AddOffsetsToTxnRequest::default()
                .with_transactional_id(TransactionalId(sb("hostile-txn")))
                .with_producer_id(ProducerId(1))
                .with_group_id(crate::groups::gid(HOSTILE_GROUP)),
            v,
        ),
        ApiKey::EndTxn => enc(
            &EndTxnRequest::default()
                .with_transactional_id(TransactionalId(sb("hostile-txn")))
                .with_producer_id(ProducerId(1)),
            v,
        ),
        ApiKey::WriteTxnMarkers => enc(&WriteTxnMarkersRequest::default(), v),
        ApiKey::TxnOffsetCommit => enc(
            &TxnOffsetCommitRequest::default()
                .with_transactional_id(TransactionalId(sb("hostile-txn")))
                .with_group_id(crate::groups::gid(HOSTILE_GROUP))
                .with_producer_id(ProducerId(1)),
            v,
        ),
        ApiKey::DescribeProducers => enc(
            &DescribeProducersRequest::default().with_topics(vec![
                describe_producers_request::TopicRequest::default()
                    .with_name(tn(&topic.name))
                    .with_partition_indexes(vec![0]),
            ]),
            v,
        ),
        ApiKey::DescribeTransactions => enc(
            &DescribeTransactionsRequest::default()
                .with_transactional_ids(vec![TransactionalId(sb("hostile-txn"))]),
            v,
        ),
        ApiKey::ListTransactions => enc(&ListTransactionsRequest::default(), v),
        ApiKey::ShareGroupHeartbeat => enc(
            &ShareGroupHeartbeatRequest::default()
                .with_group_id(crate::groups::gid("hostile-share-group"))
                .with_member_id(sb("hostile-share-member-00"))
                .with_member_epoch(0)
                .with_subscribed_topic_names(Some(vec![tn(&topic.name)])),
            v,
        ),
        ApiKey::ShareGroupDescribe => enc(
            &ShareGroupDescribeRequest::default()
                .with_group_ids(vec![crate::groups::gid("hostile-share-group")]),
            v,
        ),
        ApiKey::ShareFetch => enc(
            &ShareFetchRequest::default()
                .with_group_id(Some(crate::groups::gid("hostile-share-group")))
                .with_member_id(Some(sb("hostile-share-member-00")))
                .with_share_session_epoch(0)
                .with_max_wait_ms(0)
                .with_max_bytes(1 << 20)
                .with_max_records(10)
                .with_batch_size(10)
                .with_topics(vec![share_fetch_request::FetchTopic::default()
                    .with_topic_id(topic.id)
                    .with_partitions(vec![
                        share_fetch_request::FetchPartition::default().with_partition_index(0),
                    ])]),
            v,
        ),
        ApiKey::ShareAcknowledge => enc(
            &ShareAcknowledgeRequest::default()
                .with_group_id(Some(crate::groups::gid("hostile-share-group")))
                .with_member_id(Some(sb("hostile-share-member-00")))
                .with_share_session_epoch(-1),
            v,
        ),
        ApiKey::DescribeShareGroupOffsets => enc(
            &DescribeShareGroupOffsetsRequest::default().with_groups(vec![
                describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup::default()
                    .with_group_id(crate::groups::gid("hostile-share-group"))
                    .with_topics(None),
            ]),
            v,
        ),
        ApiKey::AlterShareGroupOffsets => enc(
            &AlterShareGroupOffsetsRequest::default()
                .with_group_id(crate::groups::gid("hostile-share-group-2")),
            v,
        ),
        ApiKey::DeleteShareGroupOffsets => enc(
            &DeleteShareGroupOffsetsRequest::default()
                .with_group_id(crate::groups::gid("hostile-share-group-2")),
            v,
        ),
        ApiKey::ReadShareGroupState => enc(
            &ReadShareGroupStateRequest::default()
                .with_group_id(sb("hostile-share-group"))
                .with_topics(vec![read_share_group_state_request::ReadStateData::default()
                    .with_topic_id(topic.id)
                    .with_partitions(vec![
                        read_share_group_state_request::PartitionData::default()
                            .with_partition(0)
                            .with_leader_epoch(-1),
                    ])]),
            v,
        ),
        ApiKey::WriteShareGroupState => enc(
            &WriteShareGroupStateRequest::default().with_group_id(sb("hostile-share-group-3")),
            v,
        ),
        _ => None,
    }
}

fn hostile_txn_topic(topic: &Topic) -> add_partitions_to_txn_request::AddPartitionsToTxnTopic {
    add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
        .with_name(tn(&topic.name))
        .with_partitions(vec![0])
}

const HUGE_I32: [u8; 4] = [0x7f, 0xff, 0xff, 0xff];
/// Unsigned varint 0xffffffff: a compact length/count of 2^32-2.
const HUGE_UVARINT: [u8; 5] = [0xff, 0xff, 0xff, 0xff, 0x0f];
/// A varint that never terminates within 10 bytes.
const ENDLESS_VARINT: [u8; 10] = [0x80; 10];

fn body_variants(
    api: i16,
    v: i16,
    sample: Option<&[u8]>,
    rng: &mut Prng,
) -> Vec<(String, Vec<u8>)> {
    let flexible = is_flexible(api, v);
    let mut out: Vec<(String, Vec<u8>)> = vec![
        ("empty body".into(), vec![]),
        ("7fffffff".into(), HUGE_I32.to_vec()),
        ("ffffffff (-1)".into(), vec![0xff; 4]),
        ("80000000 (i32 min)".into(), vec![0x80, 0, 0, 0]),
        ("varint ffffffff0f".into(), HUGE_UVARINT.to_vec()),
        ("endless varint".into(), ENDLESS_VARINT.to_vec()),
        (
            "1 element then 7fffffff".into(),
            [&1i32.to_be_bytes()[..], &HUGE_I32].concat(),
        ),
        (
            "i16 7fff string length".into(),
            vec![0x7f, 0xff, b'a', b'b'],
        ),
        (
            "tagged-field count huge".into(),
            [&[0u8][..], &HUGE_UVARINT].concat(),
        ),
        ("zeros x64".into(), vec![0u8; 64]),
        ("0xff x64".into(), vec![0xffu8; 64]),
    ];
    for n in [3usize, 17, 200, 4096] {
        out.push((format!("random {n} bytes"), rng.bytes(n)));
    }
    if let Some(s) = sample {
        let len = s.len();
        for cut in [1usize, len / 4, len / 2, len.saturating_sub(1)] {
            if cut > 0 && cut < len {
                out.push((
                    format!("sample truncated to {cut}/{len}"),
                    s[..cut].to_vec(),
                ));
            }
        }
        out.push(("sample + trailing 7fffffff".into(), [s, &HUGE_I32].concat()));
        // Positions at which to plant huge lengths: all for short samples, spread otherwise.
        let positions: Vec<usize> = if len <= POSITIONS_PER_VERSION {
            (0..len).collect()
        } else {
            (0..POSITIONS_PER_VERSION)
                .map(|i| i * len / POSITIONS_PER_VERSION)
                .collect()
        };
        for p in positions {
            let mut over = s.to_vec();
            for (i, b) in HUGE_I32.iter().enumerate() {
                if p + i < over.len() {
                    over[p + i] = *b;
                } else {
                    over.push(*b);
                }
            }
            out.push((format!("sample with 7fffffff written at {p}/{len}"), over));
            out.push((
                format!("sample[..{p}] + 7fffffff"),
                [&s[..p], &HUGE_I32].concat(),
            ));
            if flexible {
                let mut over = s.to_vec();
                for (i, b) in HUGE_UVARINT.iter().enumerate() {
                    if p + i < over.len() {
                        over[p + i] = *b;
                    } else {
                        over.push(*b);
                    }
                }
                out.push((
                    format!("sample with varint ffffffff0f written at {p}/{len}"),
                    over,
                ));
                out.push((
                    format!("sample[..{p}] + varint ffffffff0f"),
                    [&s[..p], &HUGE_UVARINT].concat(),
                ));
            }
            // Random byte flips around p.
            let mut flip = s.to_vec();
            for _ in 0..3 {
                let i = (p + (rng.next_u64() % 8) as usize).min(len - 1);
                flip[i] ^= (rng.next_u64() as u8) | 1;
            }
            out.push((format!("sample with bytes flipped near {p}/{len}"), flip));
        }
    }
    out
}

/// Header-level hostility for (api, v): payloads whose header itself is broken.
fn header_variants(api: i16, v: i16, corr: i32) -> Vec<(String, Vec<u8>)> {
    let mut prefix = Vec::new();
    prefix.extend_from_slice(&api.to_be_bytes());
    prefix.extend_from_slice(&v.to_be_bytes());
    prefix.extend_from_slice(&corr.to_be_bytes());
    let mut out = vec![
        (
            "header: client id length 0x7fff, 3 bytes".into(),
            [&prefix[..], &[0x7f, 0xff], b"abc"].concat(),
        ),
        (
            "header: client id length -2".into(),
            [&prefix[..], &[0xff, 0xfe], b"abc"].concat(),
        ),
        (
            "header: only api key + version".into(),
            prefix[..4].to_vec(),
        ),
        ("header: no client id".into(), prefix.clone()),
    ];
    if is_flexible(api, v) {
        let mut with_id = prefix.clone();
        with_id.extend_from_slice(&(CLIENT_ID.len() as i16).to_be_bytes());
        with_id.extend_from_slice(CLIENT_ID.as_bytes());
        out.push((
            "header: tagged-field count huge".into(),
            [&with_id[..], &HUGE_UVARINT].concat(),
        ));
        out.push((
            "header: tagged field 0 with huge size".into(),
            [&with_id[..], &[1u8, 0u8], &HUGE_UVARINT, b"xy"].concat(),
        ));
        out.push((
            "header: endless tagged-field varint".into(),
            [&with_id[..], &ENDLESS_VARINT].concat(),
        ));
    }
    out
}

fn build_cases(ctx: &Ctx, topic: &Topic) -> Vec<Case> {
    let mut rng = Prng::new(0x7e57_7e27);
    let mut cases = Vec::new();
    let mut corr = 1_000_000i32;
    let mut unknown = Vec::new();
    for (&api, &(min, max)) in &ctx.apis {
        if ApiKey::try_from(api).is_err() {
            unknown.push(api);
            continue;
        }
        for v in min..=max {
            let sample = sample_body(api, v, topic);
            for (desc, body) in body_variants(api, v, sample.as_deref(), &mut rng) {
                corr += 1;
                let mut payload = encode_header(api, v, corr, Some(CLIENT_ID));
                payload.extend_from_slice(&body);
                cases.push(Case {
                    api,
                    version: v,
                    desc,
                    corr,
                    payload,
                    header_valid: true,
                });
            }
            for (desc, payload) in header_variants(api, v, corr + 1) {
                corr += 1;
                cases.push(Case {
                    api,
                    version: v,
                    desc,
                    corr,
                    payload,
                    header_valid: false,
                });
            }
        }
    }
    if !unknown.is_empty() {
        eprintln!("hostile: api keys unknown to the codec, skipped: {unknown:?}");
    }
    cases
}

#[derive(Debug, Default)]
struct Tally {
    answered: usize,
    closed: usize,
    timeouts: Vec<String>,
    bad_correlation: Vec<String>,
    crash: Option<String>,
    skipped: usize,
}

#[test]
fn hostile_bodies_do_not_kill_the_broker() {
    let ctx = Ctx::new();
    let topic = ctx.topic("hostile", 1, &[]);
    {
        let mut c = ctx.client();
        produce_ok(&ctx, &mut c, &topic, 0, batch_of(3, now_ms()));
    }
    let cases = build_cases(&ctx, &topic);
    for (key, _, _) in REQUIRED {
        assert!(
            cases.iter().any(|c| c.api == *key as i16),
            "no hostile cases for required API {key:?}: is it advertised?"
        );
    }
    // Every advertised API the codec knows gets structure-aware cases (a valid sample to
    // truncate and overwrite), not only generic garbage.
    let unsampled: Vec<String> = ctx
        .apis
        .iter()
        .filter_map(|(&api, &(min, max))| {
            let key = ApiKey::try_from(api).ok()?;
            let lib = key.valid_versions();
            // Below the codec, only the versions tern serves have hand-made samples
            // (Produce v0-2 are closed unread).
            let low = if key == ApiKey::Produce {
                min.max(lib.min)
            } else {
                min
            };
            Some((api, low, max.min(lib.max)))
        })
        .flat_map(|(api, min, max)| (min..=max).map(move |v| (api, v)))
        .filter(|(api, v)| sample_body(*api, *v, &topic).is_none())
        .map(|(api, v)| format!("{} v{v}", api_name(api)))
        .collect();
    if ctx.external() {
        eprintln!("hostile: no sample body (generic cases only) for {unsampled:?}");
    } else {
        assert!(
            unsampled.is_empty(),
            "hostile: no sample request body for advertised {unsampled:?}: add one to sample_body"
        );
    }
    let total = cases.len();
    let next = AtomicUsize::new(0);
    let abort = AtomicBool::new(false);
    let tally = Mutex::new(Tally::default());
    let broker = Mutex::new(ctx);
    let addr = broker.lock().unwrap().broker.addr.clone();
    let started = Instant::now();

    std::thread::scope(|s| {
        for _ in 0..WORKERS {
            s.spawn(|| loop {
                if abort.load(Ordering::Relaxed) {
                    return;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= cases.len() {
                    return;
                }
                let case = &cases[i];
                let label = format!("{} v{} [{}]", api_name(case.api), case.version, case.desc);
                if started.elapsed() > PHASE_BUDGET {
                    tally.lock().unwrap().skipped += 1;
                    continue;
                }
                let mut attempt = 0;
                let mut stream = loop {
                    match TcpStream::connect(&addr) {
                        Ok(s) => break Some(s),
                        Err(e) => {
                            let mut ctx = broker.lock().unwrap();
                            if !ctx.broker.is_running() {
                                let why = format!(
                                    "broker process died (status {}); connect failed: {e}",
                                    ctx.broker.exit_status()
                                );
                                tally
                                    .lock()
                                    .unwrap()
                                    .crash
                                    .get_or_insert(format!("before {label}: {why}"));
                                abort.store(true, Ordering::Relaxed);
                                break None;
                            }
                            drop(ctx);
                            attempt += 1;
                            if attempt >= 10 {
                                tally.lock().unwrap().crash.get_or_insert(format!(
                                    "before {label}: broker running but connect keeps failing: {e}"
                                ));
                                abort.store(true, Ordering::Relaxed);
                                break None;
                            }
                            std::thread::sleep(Duration::from_millis(200));
                        }
                    }
                };
                let Some(mut stream) = stream.take() else {
                    return;
                };
                let _ = stream.set_nodelay(true);
                let _ = stream.set_write_timeout(Some(Duration::from_secs(5)));
                let _ = stream.write_all(&frame(&case.payload));
                let outcome = wait_outcome(&mut stream, CASE_TIMEOUT);
                drop(stream);
                let mut t = tally.lock().unwrap();
                match outcome {
                    Outcome::Frame(f) => {
                        t.answered += 1;
                        if case.header_valid && frame_correlation_id(&f) != Some(case.corr) {
                            t.bad_correlation.push(format!(
                                "{label}: response correlation id {:?}, expected {}",
                                frame_correlation_id(&f),
                                case.corr
                            ));
                        }
                    }
                    Outcome::Closed => {
                        t.closed += 1;
                        drop(t);
                        let mut ctx = broker.lock().unwrap();
                        if !ctx.broker.is_running() {
                            let st = ctx.broker.exit_status();
                            tally.lock().unwrap().crash.get_or_insert(format!(
                                "broker died on {label} (exit status {st})"
                            ));
                            abort.store(true, Ordering::Relaxed);
                        }
                    }
                    Outcome::Timeout => t.timeouts.push(label),
                }
            });
        }
    });

    let mut ctx = broker.into_inner().unwrap();
    let t = tally.into_inner().unwrap();
    eprintln!(
        "hostile: {total} cases in {:?}: {} answered, {} closed, {} timed out, {} skipped (budget)",
        started.elapsed(),
        t.answered,
        t.closed,
        t.timeouts.len(),
        t.skipped
    );
    for to in t.timeouts.iter().take(20) {
        eprintln!("hostile: neither answered nor closed within {CASE_TIMEOUT:?}: {to}");
    }
    if let Some(crash) = &t.crash {
        panic!(
            "{crash}\n--- broker log tail ---\n{}",
            ctx.broker.log_tail()
        );
    }
    ctx.assert_alive("hostile bodies");
    if let Some((hwm, rss)) = ctx.broker.memory_kib() {
        eprintln!(
            "hostile: broker peak RSS {} MiB, now {} MiB",
            hwm / 1024,
            rss / 1024
        );
        // Claimed lengths must not turn into real allocations.
        assert!(
            hwm < 1024 * 1024,
            "broker peak RSS reached {} MiB during the hostile requests",
            hwm / 1024
        );
    }
    assert_broker_serves(&ctx, "hostile bodies");
    assert!(
        t.bad_correlation.is_empty(),
        "responses with wrong correlation ids: {:#?}",
        &t.bad_correlation[..t.bad_correlation.len().min(20)]
    );
    assert_eq!(
        t.skipped,
        0,
        "hostile phase exceeded its {PHASE_BUDGET:?} budget ({} timeouts so far, e.g. {:?})",
        t.timeouts.len(),
        &t.timeouts[..t.timeouts.len().min(10)]
    );
    // A request that is neither answered nor rejected leaves clients hanging. A few
    // legitimately parked requests (e.g. a mutated Fetch asking for a long wait, or acks=0
    // produce) are tolerated.
    assert!(
        t.timeouts.len() * 50 <= total,
        "{} of {total} hostile requests were neither answered nor closed within {CASE_TIMEOUT:?}: {:#?}",
        t.timeouts.len(),
        &t.timeouts[..t.timeouts.len().min(30)]
    );
}

#[test]
fn hostile_frame_sizes_are_closed_promptly() {
    let mut ctx = Ctx::new();
    let sizes: [(i32, &str); 4] = [
        (0x7fff_ffff, "0x7fffffff (> max request size)"),
        (200 * 1024 * 1024, "200 MiB (> 100 MiB default max)"),
        (-1, "-1"),
        (i32::MIN, "i32::MIN"),
    ];
    for (size, what) in sizes {
        let mut s = TcpStream::connect(&ctx.broker.addr).expect("connect");
        s.write_all(&size.to_be_bytes()).expect("write size");
        // Don't send the body: the broker must not wait for (or allocate) it.
        let start = Instant::now();
        match wait_outcome(&mut s, Duration::from_secs(5)) {
            Outcome::Closed => {}
            Outcome::Frame(f) => panic!(
                "frame size {what}: expected the connection to be closed, got a {}-byte response",
                f.len()
            ),
            Outcome::Timeout => panic!("frame size {what}: connection not closed within 5 s"),
        }
        eprintln!("frame size {what}: closed after {:?}", start.elapsed());
        ctx.assert_alive(&format!("frame size {what}"));
        // Another client is served meanwhile.
        let mut c = ctx.client();
        let v = ctx.max_version(ApiKey::ApiVersions);
        let r = c.call(v, &api_versions_req(v));
        assert_code!(r.error_code, NONE, "ApiVersions after frame size {what}");
    }
    // Frames too short to hold a request header.
    for n in 0..8usize {
        let mut s = TcpStream::connect(&ctx.broker.addr).expect("connect");
        let payload = vec![0u8; n];
        s.write_all(&frame(&payload)).expect("write");
        let out = wait_outcome(&mut s, Duration::from_secs(5));
        assert!(
            !matches!(out, Outcome::Timeout),
            "{n}-byte frame: neither answered nor closed within 5 s"
        );
        ctx.assert_alive(&format!("{n}-byte frame"));
    }
    // A size prefix split across writes, then a frame declaring more than it sends before close.
    {
        let mut s = TcpStream::connect(&ctx.broker.addr).expect("connect");
        s.write_all(&[0, 0]).expect("write");
        std::thread::sleep(Duration::from_millis(100));
        s.write_all(&[0x10, 0x00]).expect("write"); // 4096
        s.write_all(&[1, 2, 3]).expect("write");
        drop(s);
    }
    assert_broker_serves(&ctx, "hostile frame sizes");
}

#[test]
fn many_idle_and_half_open_connections() {
    // Connections that send partial frames and stall must not block other clients.
    let ctx = Ctx::new();
    let mut stalled = Vec::new();
    for i in 0..50u32 {
        let mut s = TcpStream::connect(&ctx.broker.addr).expect("connect");
        let req = {
            let mut p = encode_header(ApiKey::ApiVersions as i16, 0, i as i32, Some(CLIENT_ID));
            p.extend_from_slice(&[]);
            frame(&p)
        };
        let cut = (i as usize) % req.len();
        s.write_all(&req[..cut]).expect("partial write");
        stalled.push(s);
    }
    let start = Instant::now();
    assert_broker_serves(&ctx, "50 stalled connections");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "serving was slow with stalled connections: {:?}",
        start.elapsed()
    );
    drop(stalled);
}
