//! The broker's ranked locks: the order and its check live in `tidemark_storage::lock_rank`,
//! beside the journal's and the store's, so one list orders them all.

pub(crate) use tidemark_storage::lock_rank::{lock, Rank, Ranked};
