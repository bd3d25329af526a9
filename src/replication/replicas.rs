//! All partitions hosted on this broker: opening them at start-up (with crash recovery
//! when the last shutdown was unclean), creating and deleting them as the metadata
//! says, and the background work on them (periodic flush, retention).
//!
//! Files it owns in the data directory:
//! - `.clean-shutdown`: written last on a clean shutdown, deleted as soon as it is read,
//!   so a crash during start-up still counts as unclean.
//! - `recovery-point-offset-checkpoint`: JSON `{"<topic>-<partition>": offset}`; below
//!   each offset the log is on disk, so recovery rescans only what lies past it.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use uuid::Uuid;

use super::leader::IsrProposal;
use super::partition::LeaderLease;
use super::partition::Partition;
use super::replica::Assigned;
use crate::cluster::topic_config::{DynamicBrokerConfigs, TopicDefaults};
use crate::cluster::{TopicAssignment, TopicSpec};
use crate::log::retention::RetentionCounts;
use crate::log::{write_atomically, Log, OpenMode};
use crate::model::{now_ms, BrokerId, Offset, TopicPartition};

const CLEAN_SHUTDOWN_FILE: &str = ".clean-shutdown";
const RECOVERY_CHECKPOINT_FILE: &str = "recovery-point-offset-checkpoint";
/// Kafka's name for the file of high watermarks.
const HIGH_WATERMARK_CHECKPOINT_FILE: &str = "replication-offset-checkpoint";

/// The ISR changes that partitions led here propose, in the order proposed.
pub type IsrChanges = tokio::sync::mpsc::UnboundedReceiver<(Arc<Partition>, IsrProposal)>;

/// A checkpoint file: `{"<topic>-<partition>": offset}`; unreadable means empty.
fn read_checkpoint(path: &Path) -> io::Result<HashMap<String, i64>> {
    match std::fs::read(path) {
        Ok(raw) => Ok(serde_json::from_slice(&raw).unwrap_or_else(|error| {
            tracing::warn!(path = %path.display(), %error, "unreadable checkpoint; ignoring it");
            HashMap::new()
        })),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(HashMap::new()),
        Err(e) => Err(e),
    }
}

/// A topic's partitions as this broker sees them, indexed by partition number.
#[derive(Debug)]
pub struct TopicReplicas {
    pub spec: TopicSpec,
    /// Logs open here: partitions this broker leads or once led. A partition that
    /// moves away stays open, so that if it comes back the same `Partition` serves
    /// it: there is never a second writer on one directory.
    local: Vec<Option<Arc<Partition>>>,
    /// Whether this broker leads each partition now.
    leading: Vec<bool>,
}

/// Why a partition is not served here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotServed {
    /// The topic has no such partition.
    Unknown,
    /// Another broker leads it (or nobody does yet).
    NotLeader,
}

impl TopicReplicas {
    /// Partition `index` if this broker leads it.
    pub fn partition(&self, index: i32) -> Result<&Arc<Partition>, NotServed> {
        let i = usize::try_from(index).map_err(|_| NotServed::Unknown)?;
        if i >= self.spec.partitions.max(0) as usize {
            return Err(NotServed::Unknown);
        }
        match (self.leading.get(i), self.local.get(i)) {
            (Some(true), Some(Some(partition))) => Ok(partition),
            _ => Err(NotServed::NotLeader),
        }
    }

    /// Partition `index` if a replica of it is open here, leading or not.
    pub fn replica(&self, index: i32) -> Option<&Arc<Partition>> {
        let i = usize::try_from(index).ok()?;
        self.local.get(i)?.as_ref()
    }

    /// The partitions this broker leads.
    pub fn led(&self) -> impl Iterator<Item = &Arc<Partition>> {
        self.local
            .iter()
            .zip(&self.leading)
            .filter_map(|(p, leading)| p.as_ref().filter(|_| *leading))
    }

    /// Every log open here, led or not.
    fn open_logs(&self) -> impl Iterator<Item = &Arc<Partition>> {
        self.local.iter().flatten()
    }
}

/// Kafka's per-partition file naming the topic incarnation the directory belongs to.
const PARTITION_METADATA_FILE: &str = "partition.metadata";

/// Whether `dir` holds data of another incarnation of the topic (deleted and
/// re-created while this broker did not host it): its data must not be served.
fn belongs_to_other_topic(dir: &Path, topic_id: Uuid) -> bool {
    match std::fs::read_to_string(dir.join(PARTITION_METADATA_FILE)) {
        Ok(text) => !text.contains(&topic_id.to_string()),
        Err(_) => false,
    }
}

fn write_partition_metadata(dir: &Path, topic_id: Uuid) -> io::Result<()> {
    let path = dir.join(PARTITION_METADATA_FILE);
    if path.exists() {
        return Ok(());
    }
    write_atomically(
        &path,
        format!("version: 0\ntopic_id: {topic_id}\n").as_bytes(),
    )
}

#[derive(Debug)]
pub struct ReplicaManager {
    data_dir: PathBuf,
    /// Topic defaults under the dynamic broker configs in force; replaced (and re-applied
    /// to every open log) when those change.
    defaults: RwLock<Arc<TopicDefaults>>,
    topics: RwLock<HashMap<String, Arc<TopicReplicas>>>,
    /// Held through every reconcile and removal: the admin path and the metadata
    /// reconciler may act on one topic at once, and two of them opening the same
    /// partition would put two writers on one directory.
    reconciling: parking_lot::Mutex<()>,
    clean_start: bool,
    recovery_points: HashMap<String, i64>,
    /// The high watermarks last checkpointed, so a restarted leader serves what was
    /// committed before its followers are back.
    high_watermarks: HashMap<String, i64>,
    node_id: i32,
    /// ISR changes proposed by the partitions this broker leads, for the store.
    isr_changes: tokio::sync::mpsc::UnboundedSender<(Arc<Partition>, IsrProposal)>,
    /// Bumped whenever replicas change role, for the fetchers to re-plan.
    roles: tokio::sync::watch::Sender<u64>,
    /// Whether this broker may lead now; every partition appends only while it may.
    lease: LeaderLease,
}

impl ReplicaManager {
    /// Prepares to open partitions in `data_dir`; reads (and removes) the clean-shutdown
    /// marker and the recovery checkpoint.
    pub fn new(
        data_dir: &Path,
        node_id: i32,
        defaults: Arc<TopicDefaults>,
        lease: LeaderLease,
    ) -> io::Result<(Self, IsrChanges)> {
        std::fs::create_dir_all(data_dir)?;
        let marker = data_dir.join(CLEAN_SHUTDOWN_FILE);
        let clean_start = marker.exists();
        if clean_start {
            std::fs::remove_file(&marker)?;
            std::fs::File::open(data_dir)?.sync_all()?;
        }
        let recovery_points = read_checkpoint(&data_dir.join(RECOVERY_CHECKPOINT_FILE))?;
        let high_watermarks = read_checkpoint(&data_dir.join(HIGH_WATERMARK_CHECKPOINT_FILE))?;
        let (isr_changes, isr_proposals) = tokio::sync::mpsc::unbounded_channel();
        tracing::info!(clean_start, data_dir = %data_dir.display(), "opening partitions");
        Ok((
            Self {
                data_dir: data_dir.to_path_buf(),
                defaults: RwLock::new(defaults),
                topics: RwLock::new(HashMap::new()),
                reconciling: parking_lot::Mutex::new(()),
                clean_start,
                recovery_points,
                high_watermarks,
                node_id,
                isr_changes,
                roles: tokio::sync::watch::channel(0).0,
                lease,
            },
            isr_proposals,
        ))
    }

    /// Announces that replicas changed role (reconcile), for the fetchers.
    pub fn roles_changed(&self) {
        self.roles.send_modify(|generation| *generation += 1);
    }

    /// A receiver that changes whenever replicas change role.
    pub fn watch_roles(&self) -> tokio::sync::watch::Receiver<u64> {
        self.roles.subscribe()
    }

    /// Queues an ISR change a led partition proposed, for the store (see
    /// `replication::alter`).
    pub fn propose_isr(&self, partition: &Arc<Partition>, proposal: IsrProposal) {
        let _ = self.isr_changes.send((Arc::clone(partition), proposal));
    }

    /// The topic defaults in force now (static settings under the dynamic broker configs).
    pub fn defaults(&self) -> Arc<TopicDefaults> {
        Arc::clone(&self.defaults.read())
    }

    /// Puts new dynamic broker configs in force: re-resolves every topic's settings
    /// (topics without an override follow the new broker values) and applies them to
    /// every open log, without a restart. Returns whether anything changed.
    pub fn set_dynamic_configs(&self, dynamic: DynamicBrokerConfigs) -> bool {
        let _one_at_a_time = self.reconciling.lock();
        let current = self.defaults();
        if *current.dynamic() == dynamic {
            return false;
        }
        let next = Arc::new(current.with_dynamic(dynamic));
        *self.defaults.write() = Arc::clone(&next);
        for topic in self.topics.read().values() {
            let log_config = next.log_config_for(&topic.spec.name, &topic.spec.configs);
            let min_isr = next.min_insync_replicas(&topic.spec.configs);
            for partition in topic.open_logs() {
                partition.set_config(log_config.clone(), min_isr);
            }
        }
        true
    }

    fn partition_dir(&self, id: &TopicPartition) -> PathBuf {
        self.data_dir.join(id.dir_name())
    }

    /// Makes the local replicas match `spec` and its `assignment`: opens the logs of
    /// the partitions this broker is a replica of (when `fresh`, wiping leftovers of a
    /// same-named topic first), makes each lead or follow under the stored leader epoch,
    /// idles and deletes the replicas the assignment no longer places here, and applies
    /// the topic's configs. Without an assignment (not placed yet) nothing is led.
    /// Idempotent. Returns the topic and the removed replicas' directories, which the
    /// caller deletes once their fetchers have stopped.
    ///
    /// `incarnation` is this process's in the cluster (`None` without one): it leads
    /// only partitions whose state names it, never one elected for a previous run of
    /// this broker, which may have held data this one lost (such a replica idles until
    /// the controller elects again).
    pub fn reconcile_topic(
        &self,
        spec: &TopicSpec,
        assignment: Option<&TopicAssignment>,
        fresh: bool,
        incarnation: Option<i64>,
    ) -> io::Result<(Arc<TopicReplicas>, Vec<Arc<Partition>>)> {
        let _one_at_a_time = self.reconciling.lock();
        let defaults = self.defaults();
        let log_config = defaults.log_config_for(&spec.name, &spec.configs);
        let min_isr = defaults.min_insync_replicas(&spec.configs);
        let count = spec.partitions.max(0) as usize;
        let existing = self.topics.read().get(&spec.name).cloned();
        let mut local: Vec<Option<Arc<Partition>>> = match &existing {
            Some(t) if t.spec.topic_id == spec.topic_id => t.local.clone(),
            _ => Vec::new(),
        };
        local.resize(count.max(local.len()), None);
        let mut leading = vec![false; local.len()];
        let mut removed = Vec::new();
        let now = now_ms();
        for (index, slot) in local.iter_mut().enumerate() {
            let state = assignment.and_then(|a| a.partition(index as i32));
            let here = state
                .is_some_and(|p| p.replicas.contains(&self.node_id) || p.leader == self.node_id);
            match state {
                Some(state) if here => {
                    if slot.is_none() {
                        *slot = Some(self.open_partition(
                            spec,
                            index as i32,
                            fresh,
                            &log_config,
                            min_isr,
                        )?);
                    }
                    if let Some(partition) = slot {
                        let assigned = partition.apply_assignment(state, incarnation, now);
                        leading[index] = matches!(assigned, Assigned::Leader { .. });
                    }
                }
                // Placed elsewhere: this replica was dropped from the partition.
                Some(_) => {
                    if let Some(partition) = slot.take() {
                        partition.become_idle();
                        removed.push(partition);
                    }
                }
                None => {
                    if let Some(partition) = slot {
                        partition.become_idle();
                    }
                }
            }
        }
        for partition in local.iter().flatten() {
            partition.set_config(log_config.clone(), min_isr);
        }
        let replicas = Arc::new(TopicReplicas {
            spec: spec.clone(),
            local,
            leading,
        });
        self.topics
            .write()
            .insert(spec.name.clone(), Arc::clone(&replicas));
        Ok((replicas, removed))
    }

    /// Deletes the files of a replica this broker no longer hosts (it was moved away
    /// and the new replicas are in sync). Its log is closed first, so no writer is left.
    pub fn delete_replica(&self, partition: &Partition) {
        if let Err(error) = partition.close() {
            tracing::warn!(partition = %partition.id(), %error, "closing a dropped replica failed");
        }
        let dir = self.partition_dir(partition.id());
        let doomed = self.data_dir.join(format!(
            "{}.{}-delete",
            partition.id().dir_name(),
            Uuid::new_v4().simple()
        ));
        if let Err(error) = std::fs::rename(&dir, &doomed) {
            tracing::warn!(dir = %dir.display(), %error, "could not move a dropped replica aside");
            return;
        }
        tracing::info!(partition = %partition.id(), "deleted a replica moved to other brokers");
        tokio::task::spawn_blocking(move || {
            if let Err(error) = std::fs::remove_dir_all(&doomed) {
                tracing::warn!(dir = %doomed.display(), %error, "could not remove a dropped replica");
            }
        });
    }

    fn open_partition(
        &self,
        spec: &TopicSpec,
        index: i32,
        fresh: bool,
        log_config: &crate::log::LogConfig,
        min_isr: i32,
    ) -> io::Result<Arc<Partition>> {
        let id = TopicPartition::new(spec.name.clone(), index);
        let dir = self.partition_dir(&id);
        if dir.exists() && (fresh || belongs_to_other_topic(&dir, spec.topic_id)) {
            // Left over from a topic of the same name deleted while we were down.
            std::fs::remove_dir_all(&dir)?;
        }
        let mode = OpenMode {
            clean: self.clean_start,
            recovery_point: self
                .recovery_points
                .get(&id.dir_name())
                .copied()
                .unwrap_or(0),
        };
        let log = Log::open(&dir, log_config.clone(), mode)?;
        write_partition_metadata(&dir, spec.topic_id)?;
        let high_watermark = self
            .high_watermarks
            .get(&id.dir_name())
            .copied()
            .unwrap_or(0);
        let partition = Partition::new(
            id,
            spec.topic_id,
            self.node_id,
            log,
            high_watermark,
            min_isr,
            self.lease.clone(),
        );
        Ok(Arc::new(partition))
    }

    /// Stops serving a topic and removes its files in the background.
    pub fn remove_topic(&self, name: &str) {
        let _one_at_a_time = self.reconciling.lock();
        let Some(topic) = self.topics.write().remove(name) else {
            return;
        };
        // Every partition directory, open here or not (it may hold data from a
        // time this broker led it).
        for index in 0..topic.spec.partitions.max(topic.local.len() as i32) {
            let id = TopicPartition::new(name, index);
            let dir = self.partition_dir(&id);
            if !dir.exists() {
                continue;
            }
            let doomed = self.data_dir.join(format!(
                "{}.{}-delete",
                id.dir_name(),
                Uuid::new_v4().simple()
            ));
            if let Err(error) = std::fs::rename(&dir, &doomed) {
                tracing::warn!(dir = %dir.display(), %error, "could not move deleted partition aside");
                continue;
            }
            tokio::task::spawn_blocking(move || {
                if let Err(error) = std::fs::remove_dir_all(&doomed) {
                    tracing::warn!(dir = %doomed.display(), %error, "could not remove deleted partition");
                }
            });
        }
    }

    pub fn topic(&self, name: &str) -> Option<Arc<TopicReplicas>> {
        self.topics.read().get(name).cloned()
    }

    /// Names of the topics known here.
    pub fn topic_names(&self) -> Vec<String> {
        self.topics.read().keys().cloned().collect()
    }

    /// Every topic known here.
    pub fn topics(&self) -> Vec<Arc<TopicReplicas>> {
        self.topics.read().values().cloned().collect()
    }

    pub fn topic_by_id(&self, topic_id: Uuid) -> Option<Arc<TopicReplicas>> {
        self.topics
            .read()
            .values()
            .find(|t| t.spec.topic_id == topic_id)
            .cloned()
    }

    /// Partition `partition` of `topic` if this broker leads it.
    pub fn partition(&self, topic: &str, partition: i32) -> Option<Arc<Partition>> {
        self.topics
            .read()
            .get(topic)?
            .partition(partition)
            .ok()
            .cloned()
    }

    /// The directory holding every partition of this broker (its one log dir).
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Every log open here (led or not): what flushing, retention and shutdown cover.
    pub fn all_partitions(&self) -> Vec<Arc<Partition>> {
        self.topics
            .read()
            .values()
            .flat_map(|t| t.open_logs().cloned())
            .collect()
    }

    /// The replicas here that follow broker `leader`.
    pub fn followed_from(&self, leader: i32) -> Vec<Arc<Partition>> {
        self.all_partitions()
            .into_iter()
            .filter(|p| p.following() == Some(BrokerId(leader)))
            .collect()
    }

    /// The partitions this broker leads.
    pub fn led_partitions(&self) -> Vec<Arc<Partition>> {
        self.topics
            .read()
            .values()
            .flat_map(|t| t.led().cloned())
            .collect()
    }

    /// Flushes every partition whose oldest unflushed write has waited its topic's
    /// `flush.ms` (the broker's `log.flush.interval.ms` unless the topic sets one), then
    /// records the recovery points if anything was flushed. Returns how long until the
    /// next partition is due, if one has unflushed data.
    pub async fn flush_due(&self) -> Option<Duration> {
        let mut flushed = false;
        let mut next: Option<Duration> = None;
        for partition in self.all_partitions() {
            match partition.flush_wait(Instant::now()) {
                Some(wait) if wait.is_zero() => {
                    // A failure takes the partition offline and is logged there.
                    let _ = partition.flush().await;
                    flushed = true;
                }
                Some(wait) => next = Some(next.map_or(wait, |n| n.min(wait))),
                None => {}
            }
        }
        if flushed {
            self.write_recovery_checkpoint_off_runtime().await;
        }
        next
    }

    /// Flushes every partition with unflushed data, then records the recovery points.
    pub async fn flush_all(&self) {
        for partition in self.all_partitions() {
            if partition.unflushed_bytes() > 0 {
                // A failure takes the partition offline and is logged there.
                let _ = partition.flush().await;
            }
        }
        self.write_recovery_checkpoint_off_runtime().await;
    }

    /// [`Self::write_recovery_checkpoint`] on a blocking thread: its two fsyncs would
    /// otherwise stall a runtime worker, and every connection queued behind it, for as
    /// long as the disk takes (tens of milliseconds under writeback).
    async fn write_recovery_checkpoint_off_runtime(&self) {
        let written = match self.recovery_checkpoint() {
            Ok(checkpoint) => {
                let data_dir = self.data_dir.clone();
                tokio::task::spawn_blocking(move || checkpoint.write(&data_dir))
                    .await
                    .unwrap_or_else(|join| Err(io::Error::other(join)))
            }
            Err(error) => Err(error),
        };
        if let Err(error) = written {
            tracing::warn!(%error, "could not write the recovery checkpoint");
        }
    }

    fn write_recovery_checkpoint(&self) -> io::Result<()> {
        self.recovery_checkpoint()?.write(&self.data_dir)
    }

    /// Every partition's recovery point and high watermark, as their checkpoint files
    /// hold them.
    fn recovery_checkpoint(&self) -> io::Result<RecoveryCheckpoint> {
        let partitions = self.all_partitions();
        let points: BTreeMap<String, i64> = partitions
            .iter()
            .map(|p| (p.id().dir_name(), p.checkpoint_offset()))
            .collect();
        let high_watermarks: BTreeMap<String, Offset> = partitions
            .iter()
            .map(|p| (p.id().dir_name(), p.high_watermark()))
            .collect();
        Ok(RecoveryCheckpoint {
            recovery_points: serde_json::to_vec(&points).map_err(io::Error::other)?,
            high_watermarks: serde_json::to_vec(&high_watermarks).map_err(io::Error::other)?,
        })
    }

    /// Deletes expired segments in every partition. `disk_low`: the data directory is
    /// nearly full, and retention deletes what the archive does not have yet too.
    pub fn apply_retention(&self, disk_low: bool) {
        let now = now_ms();
        for partition in self.all_partitions() {
            match partition.apply_retention(now, disk_low) {
                Ok(counts) => log_retention(partition.id(), counts),
                Err(error) => {
                    tracing::warn!(partition = %partition.id(), %error, "retention failed")
                }
            }
        }
    }

    /// Closes every log cleanly and writes the clean-shutdown marker last.
    pub fn shutdown(&self) -> io::Result<()> {
        let mut all_clean = true;
        for partition in self.all_partitions() {
            if let Err(error) = partition.close() {
                tracing::error!(partition = %partition.id(), %error, "closing log failed");
                all_clean = false;
            }
        }
        self.write_recovery_checkpoint()?;
        if all_clean {
            write_atomically(&self.data_dir.join(CLEAN_SHUTDOWN_FILE), b"")?;
        }
        Ok(())
    }
}

fn log_retention(id: &TopicPartition, counts: RetentionCounts) {
    let RetentionCounts {
        deleted,
        held,
        unarchived,
    } = counts;
    if deleted > 0 {
        tracing::info!(partition = %id, deleted, unarchived, "retention deleted segments");
    }
    if unarchived > 0 {
        metrics::counter!(crate::metrics::ARCHIVE_SKIPPED_SEGMENTS_TOTAL, "topic" => id.topic.clone())
            .increment(unarchived as u64);
        tracing::warn!(partition = %id, unarchived, "retention deleted segments the archive does not have");
    }
    if held > 0 {
        // Between two exports this is the normal state; a failed export logs its WARN.
        tracing::debug!(partition = %id, held, "retention waits for the archive: expired segments kept until they are archived");
    }
}

/// The two checkpoint files' contents, gathered under the partitions' locks and written
/// without them.
struct RecoveryCheckpoint {
    recovery_points: Vec<u8>,
    high_watermarks: Vec<u8>,
}

impl RecoveryCheckpoint {
    fn write(&self, data_dir: &Path) -> io::Result<()> {
        write_atomically(
            &data_dir.join(RECOVERY_CHECKPOINT_FILE),
            &self.recovery_points,
        )?;
        write_atomically(
            &data_dir.join(HIGH_WATERMARK_CHECKPOINT_FILE),
            &self.high_watermarks,
        )
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn spec(name: &str) -> TopicSpec {
        TopicSpec {
            name: name.to_string(),
            topic_id: Uuid::new_v4(),
            numeric_id: 1,
            partitions: 1,
            replication_factor: 1,
            configs: BTreeMap::new(),
            replica_assignments: BTreeMap::new(),
        }
    }

    /// Node 0's replica manager over `dir`, 7-day retention, 1 s flush interval.
    fn manager(dir: &Path) -> io::Result<ReplicaManager> {
        let builtin = vec![("retention.ms", "604800000".to_string())];
        let defaults = Arc::new(TopicDefaults::new(&builtin, &BTreeMap::new()));
        Ok(ReplicaManager::new(dir, 0, defaults, LeaderLease::always())?.0)
    }

    #[test]
    fn dynamic_configs_reach_open_logs_and_their_flush_deadline() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let replicas = manager(dir.path())?;
        let orders = spec("orders");
        let assignment = TopicAssignment::all_on(&orders, 0);
        replicas.reconcile_topic(&orders, Some(&assignment), true, None)?;
        let mut dynamic = DynamicBrokerConfigs::default();
        dynamic
            .cluster_default
            .insert("log.retention.ms".into(), "1".into());
        dynamic
            .this_broker
            .insert("log.flush.interval.ms".into(), "250".into());
        assert!(replicas.set_dynamic_configs(dynamic.clone()));
        assert!(
            !replicas.set_dynamic_configs(dynamic),
            "no change the second time"
        );
        // The open log now ages everything out after 1 ms: retention deletes its data.
        let partition = replicas
            .partition("orders", 0)
            .ok_or_else(|| io::Error::other("led"))?;
        partition
            .append(
                &crate::log::records::testing::simple_batch(3, 1_000),
                1_000,
                crate::replication::Acks::Leader,
            )
            .map_err(io::Error::other)?;
        // Its flush.ms follows log.flush.interval.ms: due within 250 ms of the last flush.
        let wait = partition
            .flush_wait(Instant::now())
            .ok_or_else(|| io::Error::other("unflushed data"))?;
        assert!(wait <= Duration::from_millis(250), "{wait:?}");
        replicas.apply_retention(false);
        let offsets = partition.offsets();
        let log_start = offsets.log_start().0;
        let log_end = offsets.log_end().0;
        assert_eq!((log_start, log_end), (3, 3));
        partition
            .append(
                &crate::log::records::testing::simple_batch(1, 2_000),
                2_000,
                crate::replication::Acks::Leader,
            )
            .map_err(io::Error::other)?;
        assert!(replicas.set_dynamic_configs(DynamicBrokerConfigs::default()));
        // Back to the topic default (no broker value here: Kafka's, never by time).
        let wait = partition.flush_wait(Instant::now());
        assert!(
            wait.is_some_and(|w| w > Duration::from_secs(3600)),
            "{wait:?}"
        );
        Ok(())
    }

    #[test]
    fn a_restarted_broker_does_not_lead_on_state_elected_for_its_previous_run() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let replicas = manager(dir.path())?;
        let orders = spec("orders");
        let mut assignment = TopicAssignment::all_on(&orders, 0);
        for p in &mut assignment.partitions {
            p.leader_incarnation = 41;
        }
        // This process registered at revision 57: the state was elected for run 41.
        replicas.reconcile_topic(&orders, Some(&assignment), true, Some(57))?;
        let partition = replicas
            .all_partitions()
            .into_iter()
            .find(|p| p.id().partition == 0)
            .ok_or_else(|| io::Error::other("not open"))?;
        assert!(!partition.is_leader(), "led on a previous run's election");
        assert!(
            replicas.partition("orders", 0).is_none(),
            "not served as led"
        );
        // The controller elects it again, under this incarnation.
        for p in &mut assignment.partitions {
            p.leader_incarnation = 57;
        }
        replicas.reconcile_topic(&orders, Some(&assignment), false, Some(57))?;
        assert!(partition.is_leader());
        Ok(())
    }
}
