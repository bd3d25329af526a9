//! Reads with the revision a compare-and-swap must match, and the transactions that
//! write (returning once this broker's cache has seen them where asked).

use std::collections::BTreeMap;

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, Txn, TxnOp, TxnOpResponse, TxnResponse,
};

use super::keys::{classify, Entry};
use super::{corrupt, etcd_error, EtcdStore};
use crate::cluster::store::{MetadataError, TopicAssignment, TopicSpec};
use crate::limits::ETCD_CAS_ATTEMPTS as CAS_ATTEMPTS;

impl EtcdStore {
    pub(super) async fn txn(&self, txn: Txn) -> Result<TxnResponse, MetadataError> {
        self.client.clone().txn(txn).await.map_err(etcd_error)
    }

    /// Replaces a whole config map at `key` (a broker level's or a group's; an empty
    /// map deletes the key): last writer wins, like Kafka's own config writes.
    pub(super) async fn replace_configs(
        &self,
        key: String,
        configs: &BTreeMap<String, String>,
    ) -> Result<(), MetadataError> {
        let operation = if configs.is_empty() {
            TxnOp::delete(key, None)
        } else {
            let value = serde_json::to_vec(configs).map_err(|e| corrupt(&key, e))?;
            TxnOp::put(key, value, None)
        };
        self.txn_seen(Txn::new().and_then([operation])).await?;
        Ok(())
    }

    /// Runs `txn`; when it succeeded, returns only once this broker's cache has it
    /// (read-your-writes).
    pub(super) async fn txn_seen(&self, txn: Txn) -> Result<TxnResponse, MetadataError> {
        let response = self.txn(txn).await?;
        if response.succeeded() {
            self.wait_applied(response.header().map_or(0, |h| h.revision()))
                .await;
        }
        Ok(response)
    }

    /// Runs independent operations in transactions of at most `TXN_OPS_MAX` (etcd refuses
    /// larger ones, `--max-txn-ops` defaults to 128), each seen by the cache before the next.
    pub(super) async fn write_in_chunks(
        &self,
        operations: Vec<TxnOp>,
    ) -> Result<(), MetadataError> {
        const TXN_OPS_MAX: usize = 100;
        let mut operations = operations.into_iter().peekable();
        while operations.peek().is_some() {
            let chunk: Vec<TxnOp> = operations.by_ref().take(TXN_OPS_MAX).collect();
            self.txn_seen(Txn::new().and_then(chunk)).await?;
        }
        Ok(())
    }

    pub(super) async fn get(&self, key: &str) -> Result<Option<KeyValue>, MetadataError> {
        let mut response = self
            .client
            .clone()
            .get(key, None)
            .await
            .map_err(etcd_error)?;
        Ok(response.take_kvs().into_iter().next())
    }

    /// Reads a topic's placement with the revision a compare-and-swap must match.
    pub(super) async fn read_assignment(
        &self,
        topic: &str,
    ) -> Result<Option<(TopicAssignment, i64)>, MetadataError> {
        let key = self.keys.assignment(topic);
        let Some(kv) = self.get(&key).await? else {
            return Ok(None);
        };
        let assignment = serde_json::from_slice(kv.value()).map_err(|e| corrupt(&key, e))?;
        Ok(Some((assignment, kv.mod_revision())))
    }

    /// Reads a counter: its next value (or `initial`) and the comparison that holds
    /// while nobody else has moved it.
    pub(super) async fn read_counter(
        &self,
        key: &str,
        initial: i64,
    ) -> Result<(i64, Compare), MetadataError> {
        match self.get(key).await? {
            None => Ok((initial, Compare::create_revision(key, CompareOp::Equal, 0))),
            Some(kv) => {
                let value = kv
                    .value_str()
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| MetadataError::Corrupt(format!("{key} is not a number")))?;
                Ok((
                    value,
                    Compare::mod_revision(key, CompareOp::Equal, kv.mod_revision()),
                ))
            }
        }
    }

    /// Reads a topic with the revision a compare-and-swap on it must match.
    pub(super) async fn read_topic(&self, name: &str) -> Result<(TopicSpec, i64), MetadataError> {
        let key = self.keys.topic(name);
        let kv = self
            .get(&key)
            .await?
            .ok_or_else(|| MetadataError::UnknownTopic(name.to_string()))?;
        let spec = serde_json::from_slice(kv.value()).map_err(|e| corrupt(&key, e))?;
        Ok((spec, kv.mod_revision()))
    }

    /// Writes `value` to `key` only if nobody changed the key since `revision` (the
    /// compare-and-swap of every read-modify-write here); true when written and seen.
    pub(super) async fn put_if_unchanged<T: serde::Serialize>(
        &self,
        key: &str,
        revision: i64,
        value: &T,
    ) -> Result<bool, MetadataError> {
        self.put_if_unchanged_and(key, revision, value, Vec::new())
            .await
    }

    /// [`Self::put_if_unchanged`], when every one of `guards` holds too.
    pub(super) async fn put_if_unchanged_and<T: serde::Serialize>(
        &self,
        key: &str,
        revision: i64,
        value: &T,
        guards: Vec<Compare>,
    ) -> Result<bool, MetadataError> {
        let value = serde_json::to_vec(value).map_err(|e| corrupt(key, e))?;
        let mut compares = vec![Compare::mod_revision(key, CompareOp::Equal, revision)];
        compares.extend(guards);
        let txn = Txn::new()
            .when(compares)
            .and_then([TxnOp::put(key, value, None)]);
        Ok(self.txn_seen(txn).await?.succeeded())
    }

    /// Each registered broker's incarnation (its registration's create revision), read
    /// from etcd rather than the cache: a restart the watch has not delivered yet
    /// counts.
    pub(super) async fn read_incarnations(&self) -> Result<BTreeMap<i32, i64>, MetadataError> {
        let response = self
            .client
            .clone()
            .get(self.keys.brokers(), Some(GetOptions::new().with_prefix()))
            .await
            .map_err(etcd_error)?;
        Ok(response
            .kvs()
            .iter()
            .filter_map(|kv| match classify(&self.keys.prefix, kv.key_str().ok()?) {
                Entry::Broker(id) => Some((id, kv.create_revision())),
                _ => None,
            })
            .collect())
    }

    /// The comparison that holds while `broker` is registered in the run `incarnation`
    /// names (any run when `None`): an ISR admission is written only if it still holds.
    pub(super) fn still_registered(&self, broker: i32, incarnation: Option<i64>) -> Compare {
        let key = self.keys.broker(broker);
        match incarnation {
            Some(incarnation) => Compare::create_revision(key, CompareOp::Equal, incarnation),
            None => Compare::create_revision(key, CompareOp::Greater, 0),
        }
    }

    /// Changes a topic with `change`, retrying when someone else changed it meanwhile.
    pub(super) async fn update_topic(
        &self,
        name: &str,
        change: impl Fn(&mut TopicSpec) -> Result<(), MetadataError>,
    ) -> Result<TopicSpec, MetadataError> {
        let key = self.keys.topic(name);
        for _ in 0..CAS_ATTEMPTS {
            let (mut spec, revision) = self.read_topic(name).await?;
            change(&mut spec)?;
            if self.put_if_unchanged(&key, revision, &spec).await? {
                return Ok(spec);
            }
        }
        Err(MetadataError::Contended(name.to_string()))
    }
}

/// The revision of the key the else branch of a "create if absent" transaction
/// found, if it found one.
pub(super) fn found_existing(response: &TxnResponse) -> Option<i64> {
    response.op_responses().iter().find_map(|r| match r {
        TxnOpResponse::Get(get) => get.kvs().first().map(|kv| kv.mod_revision()),
        _ => None,
    })
}
