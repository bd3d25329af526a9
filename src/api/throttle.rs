//! `throttle_time_ms` on every response that has it: the API table sets it from the
//! request's client quotas (`RequestContext::record_request_time`), so a throttle is
//! never reported by some APIs and forgotten by others.

use kafka_protocol::messages::*;

/// A response with (or, for the few without, standing in for) a `throttle_time_ms`.
pub trait ThrottleTime {
    fn set_throttle_time_ms(&mut self, ms: i32);
}

macro_rules! throttle_time {
    (with: $($with:ident),* $(,)?; without: $($without:ident),* $(,)?) => {
        $(impl ThrottleTime for $with {
            fn set_throttle_time_ms(&mut self, ms: i32) {
                self.throttle_time_ms = ms;
            }
        })*
        $(impl ThrottleTime for $without {
            fn set_throttle_time_ms(&mut self, _ms: i32) {}
        })*
    };
}

throttle_time! {
    with: ProduceResponse, FetchResponse, ListOffsetsResponse, MetadataResponse,
        ApiVersionsResponse, CreateTopicsResponse, DeleteTopicsResponse,
        DeleteRecordsResponse, OffsetForLeaderEpochResponse, InitProducerIdResponse,
        DescribeConfigsResponse, AlterConfigsResponse, CreatePartitionsResponse,
        IncrementalAlterConfigsResponse, DescribeClusterResponse, DescribeLogDirsResponse,
        ElectLeadersResponse, AlterPartitionReassignmentsResponse,
        ListPartitionReassignmentsResponse, FindCoordinatorResponse, JoinGroupResponse,
        HeartbeatResponse, LeaveGroupResponse, SyncGroupResponse, OffsetCommitResponse,
        OffsetFetchResponse, DescribeGroupsResponse, ListGroupsResponse,
        DeleteGroupsResponse, OffsetDeleteResponse, ConsumerGroupHeartbeatResponse,
        ConsumerGroupDescribeResponse, ShareGroupHeartbeatResponse,
        ShareGroupDescribeResponse, ShareFetchResponse, ShareAcknowledgeResponse,
        DescribeShareGroupOffsetsResponse, AlterShareGroupOffsetsResponse,
        DeleteShareGroupOffsetsResponse, DescribeUserScramCredentialsResponse,
        AlterUserScramCredentialsResponse, DescribeAclsResponse, CreateAclsResponse,
        DeleteAclsResponse, AddPartitionsToTxnResponse, AddOffsetsToTxnResponse,
        EndTxnResponse, TxnOffsetCommitResponse, DescribeProducersResponse,
        DescribeTransactionsResponse, ListTransactionsResponse,
        DescribeClientQuotasResponse, AlterClientQuotasResponse;
    without: WriteTxnMarkersResponse, ReadShareGroupStateResponse, WriteShareGroupStateResponse, SaslHandshakeResponse, SaslAuthenticateResponse
}

/// Requests no client quota counts: the SASL exchange and version negotiation (before
/// a client is known) and the broker-to-broker APIs (Kafka exempts cluster actions).
/// Follower fetches are exempted by the fetch itself.
pub fn exempt_from_quotas(key: ApiKey) -> bool {
    matches!(
        key,
        ApiKey::ApiVersions
            | ApiKey::SaslHandshake
            | ApiKey::SaslAuthenticate
            | ApiKey::WriteTxnMarkers
            | ApiKey::ReadShareGroupState
            | ApiKey::WriteShareGroupState
    )
}
