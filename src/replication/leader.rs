//! TEMPORARY stand-in with the agreed signatures; replaced by the repl-state branch.
#![allow(dead_code, unused_variables)]

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrProposal {
    pub isr: Vec<i32>,
    pub partition_epoch: i32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckCheck {
    Wait,
    Done,
    NotEnoughReplicasAfterAppend,
}

#[derive(Debug)]
pub struct LeaderState {
    node_id: i32,
    isr: Vec<i32>,
    partition_epoch: i32,
    hw: i64,
    ends: std::collections::BTreeMap<i32, (i64, i64)>,
}

impl LeaderState {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        node_id: i32,
        leader_epoch: i32,
        partition_epoch: i32,
        replicas: Vec<i32>,
        isr: Vec<i32>,
        log_end: i64,
        high_watermark: i64,
        epoch_start_offset: i64,
        now_ms: i64,
    ) -> Self {
        Self {
            node_id,
            isr,
            partition_epoch,
            hw: high_watermark,
            ends: Default::default(),
        }
    }
    pub fn on_follower_fetch(
        &mut self,
        follower: i32,
        fetch_offset: i64,
        leader_log_end: i64,
        now_ms: i64,
    ) -> (bool, Option<IsrProposal>) {
        self.ends.insert(follower, (fetch_offset, now_ms));
        (self.on_leader_append(leader_log_end), None)
    }
    pub fn on_leader_append(&mut self, leader_log_end: i64) -> bool {
        let mut hw = leader_log_end;
        for m in &self.isr {
            if *m != self.node_id {
                hw = hw.min(self.ends.get(m).map_or(-1, |e| e.0));
            }
        }
        if hw > self.hw {
            self.hw = hw;
            true
        } else {
            false
        }
    }
    pub fn tick(
        &mut self,
        now_ms: i64,
        lag_max_ms: i64,
        leader_log_end: i64,
    ) -> Option<IsrProposal> {
        None
    }
    pub fn proposal_committed(&mut self, isr: Vec<i32>, partition_epoch: i32) {
        self.isr = isr;
        self.partition_epoch = partition_epoch;
    }
    pub fn proposal_failed(&mut self) {}
    pub fn update_from_store(&mut self, replicas: Vec<i32>, isr: Vec<i32>, partition_epoch: i32) {
        self.isr = isr;
        self.partition_epoch = partition_epoch;
    }
    pub fn high_watermark(&self) -> i64 {
        self.hw
    }
    pub fn isr(&self) -> &[i32] {
        &self.isr
    }
    pub fn has_min_isr(&self, min_insync_replicas: i32) -> bool {
        self.isr.len() as i32 >= min_insync_replicas
    }
    pub fn ack_check(&self, last_offset: i64, min_insync_replicas: i32) -> AckCheck {
        if self.hw > last_offset {
            if self.has_min_isr(min_insync_replicas) {
                AckCheck::Done
            } else {
                AckCheck::NotEnoughReplicasAfterAppend
            }
        } else {
            AckCheck::Wait
        }
    }
    pub fn followers(&self) -> impl Iterator<Item = (i32, i64, i64)> + '_ {
        self.ends.iter().map(|(f, (o, t))| (*f, *o, *t))
    }
}
