//! The leader lease: whether this broker's cluster session still lets it lead, checked
//! inside every append.

/// Whether this broker's cluster session lets it act as a leader now
/// (`MetadataStore::may_lead`): a broker whose lease may have lapsed appends nothing, so
/// that a partition is never written by two leaders at once.
#[derive(Clone)]
pub struct LeaderLease(std::sync::Arc<dyn Fn() -> bool + Send + Sync>);

impl LeaderLease {
    pub fn new(may_lead: impl Fn() -> bool + Send + Sync + 'static) -> Self {
        Self(std::sync::Arc::new(may_lead))
    }
    /// Always good: a single broker, or a test.
    pub fn always() -> Self {
        Self::new(|| true)
    }
    pub fn may_lead(&self) -> bool {
        (self.0)()
    }
}

impl std::fmt::Debug for LeaderLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("LeaderLease")
            .field(&self.may_lead())
            .finish()
    }
}
