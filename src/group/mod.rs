//! Consumer groups: membership (`state`), committed offsets (`offsets`) and the
//! coordinator that drives them (`coordinator`).

pub mod coordinator;
pub mod offsets;
pub mod state;
