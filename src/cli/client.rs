//! A minimal Kafka client for the admin commands: one connection per broker, version
//! negotiation through ApiVersions, request/response framing. It speaks only the
//! public protocol, so the commands work against Apache Kafka as well as tern.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest response the CLI accepts.
const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;
const TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug)]
pub struct Client {
    stream: TcpStream,
    address: String,
    correlation_id: i32,
    versions: HashMap<i16, (i16, i16)>,
}

impl Client {
    /// Connects and learns the broker's API versions.
    pub async fn connect(address: &str) -> anyhow::Result<Self> {
        let stream = tokio::time::timeout(TIMEOUT, TcpStream::connect(address))
            .await
            .map_err(|_| anyhow!("connecting to {address} timed out"))?
            .with_context(|| format!("connecting to {address}"))?;
        stream.set_nodelay(true)?;
        let mut client = Self {
            stream,
            address: address.to_string(),
            correlation_id: 0,
            versions: HashMap::new(),
        };
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("tern-cli"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let response: ApiVersionsResponse = client.send_at(request, 3).await?;
        if response.error_code != 0 {
            bail!(
                "{address} refused ApiVersions (error {})",
                response.error_code
            );
        }
        client.versions = response
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect();
        Ok(client)
    }

    pub fn address(&self) -> &str {
        &self.address
    }

    /// The highest version both sides speak, up to `preferred`.
    pub fn version_for(&self, key: ApiKey, preferred: i16) -> anyhow::Result<i16> {
        let (min, max) = self
            .versions
            .get(&(key as i16))
            .copied()
            .ok_or_else(|| anyhow!("{} does not support {key:?}", self.address))?;
        let ours = key.valid_versions();
        let version = preferred.min(max).min(ours.max);
        if version < min || version < ours.min {
            bail!(
                "no common {key:?} version with {} (broker {min}-{max})",
                self.address
            );
        }
        Ok(version)
    }

    /// Sends `request` at the best common version up to `preferred`.
    pub async fn send<R>(
        &mut self,
        request: R,
        preferred: i16,
    ) -> anyhow::Result<(i16, R::Response)>
    where
        R: Request + Encodable + HeaderVersion,
        R::Response: Decodable + HeaderVersion,
    {
        let version = self.version_for(
            R::KEY.try_into().map_err(|_| anyhow!("unknown api key"))?,
            preferred,
        )?;
        let response = self.send_at(request, version).await?;
        Ok((version, response))
    }

    async fn send_at<R>(&mut self, request: R, version: i16) -> anyhow::Result<R::Response>
    where
        R: Request + Encodable + HeaderVersion,
        R::Response: Decodable + HeaderVersion,
    {
        self.correlation_id += 1;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("tern-cli")));
        let mut out = BytesMut::new();
        out.put_i32(0);
        header.encode(&mut out, R::header_version(version))?;
        request.encode(&mut out, version)?;
        let size = i32::try_from(out.len() - 4)?;
        out[..4].copy_from_slice(&size.to_be_bytes());
        let exchange = async {
            self.stream.write_all(&out).await?;
            let size = self.stream.read_i32().await?;
            let size = usize::try_from(size).map_err(|_| anyhow!("negative response size"))?;
            if size > MAX_RESPONSE_BYTES {
                bail!("response of {size} bytes is too large");
            }
            let mut body = vec![0u8; size];
            self.stream.read_exact(&mut body).await?;
            anyhow::Ok(Bytes::from(body))
        };
        let mut body = tokio::time::timeout(TIMEOUT, exchange)
            .await
            .map_err(|_| anyhow!("{} did not answer in time", self.address))??;
        // ApiVersions answers with header v0 whatever the request version.
        let header_version = if R::KEY == ApiKey::ApiVersions as i16 {
            0
        } else {
            R::Response::header_version(version)
        };
        let header = crate::alloc::decoding(|| ResponseHeader::decode(&mut body, header_version))?;
        if header.correlation_id != self.correlation_id {
            bail!(
                "response for correlation id {} while waiting for {}",
                header.correlation_id,
                self.correlation_id
            );
        }
        let response = crate::alloc::decoding(|| R::Response::decode(&mut body, version))
            .with_context(|| format!("decoding {:?} v{version} response", R::KEY))?;
        if body.has_remaining() {
            tracing::debug!(left = body.remaining(), "response had trailing bytes");
        }
        Ok(response)
    }
}

/// Offsets of `partitions` of `topic` at `timestamp` (-1 latest, -2 earliest), each asked
/// of the partition's leader (found through `bootstrap`): in a cluster only the leader
/// answers ListOffsets. Partitions without a reachable leader are left out.
pub async fn offsets_from_leaders(
    bootstrap: &mut Client,
    topic: &str,
    partitions: &[i32],
    timestamp: i64,
) -> anyhow::Result<std::collections::BTreeMap<i32, i64>> {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::{ListOffsetsRequest, MetadataRequest, TopicName};

    let name = TopicName(StrBytes::from_string(topic.to_string()));
    let request = MetadataRequest::default()
        .with_topics(Some(vec![
            MetadataRequestTopic::default().with_name(Some(name.clone()))
        ]))
        .with_allow_auto_topic_creation(false);
    let (_, metadata) = bootstrap.send(request, 12).await?;
    let addresses: HashMap<i32, String> = metadata
        .brokers
        .iter()
        .map(|b| (b.node_id.0, format!("{}:{}", b.host, b.port)))
        .collect();
    let mut by_leader: HashMap<i32, Vec<i32>> = HashMap::new();
    for p in metadata.topics.iter().flat_map(|t| t.partitions.iter()) {
        if partitions.contains(&p.partition_index) {
            by_leader
                .entry(p.leader_id.0)
                .or_default()
                .push(p.partition_index);
        }
    }
    let mut out = std::collections::BTreeMap::new();
    for (leader, wanted) in by_leader {
        let Some(address) = addresses.get(&leader) else {
            continue;
        };
        let request = ListOffsetsRequest::default()
            .with_replica_id((-1).into())
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(name.clone())
                .with_partitions(
                    wanted
                        .iter()
                        .map(|&p| {
                            ListOffsetsPartition::default()
                                .with_partition_index(p)
                                .with_timestamp(timestamp)
                        })
                        .collect(),
                )]);
        let response = if address == bootstrap.address() {
            bootstrap.send(request, 7).await?.1
        } else {
            Client::connect(address).await?.send(request, 7).await?.1
        };
        for p in response.topics.iter().flat_map(|t| t.partitions.iter()) {
            if p.error_code == 0 {
                out.insert(p.partition_index, p.offset);
            }
        }
    }
    Ok(out)
}
