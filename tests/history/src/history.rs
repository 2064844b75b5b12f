//! What a history is made of: operations with their invocation and
//! completion times, the call each made and the outcome each saw, and the
//! [`Recorder`] concurrent clients write them into.
//!
//! A history is about one collection of objects (say the ConfigMaps of one
//! namespace) whose keys are object names. Every write carries a value no
//! other write carries (the harness writes `"<client>-<sequence>"`), so a
//! read tells which write it sees.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// A resourceVersion: the store's global revision, as a number.
pub type Rv = u64;

/// Nanoseconds since the recording started.
pub type Time = u64;

/// One operation of one client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operation {
    /// Which client ran it (a client runs one operation at a time, except
    /// its watches).
    pub client: u32,
    /// When the request was sent.
    pub invoke: Time,
    /// When the answer arrived; `None` when no answer ever came, so its
    /// effect may take place at any time after `invoke`.
    pub complete: Option<Time>,
    pub call: Call,
    pub outcome: Outcome,
}

/// What a client asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Call {
    /// Create `key` holding `value`.
    Create { key: String, value: String },
    /// Replace `key` with `value` if its resourceVersion is `expected`.
    Update {
        key: String,
        expected: Rv,
        value: String,
    },
    /// Delete `key`, if its resourceVersion is `expected` when one is given.
    Delete { key: String, expected: Option<Rv> },
    /// Read `key`.
    Get { key: String },
    /// Read every key of the collection at once.
    List,
    /// Watch the collection from resourceVersion `from` (exclusive).
    Watch { from: Rv },
}

/// What the client saw. A write whose outcome is [`Outcome::Unknown`] may
/// or may not have taken effect (a timeout, a broken connection, a 5xx).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// A create or update took effect at revision `rv`.
    Written { rv: Rv },
    /// A delete took effect, at revision `rv` when the answer says.
    Deleted { rv: Option<Rv> },
    /// A create found the key present (409 AlreadyExists).
    AlreadyExists,
    /// An update or delete found another resourceVersion (409 Conflict).
    Conflict,
    /// The key was absent (404).
    NotFound,
    /// A get found the key holding `value` written at `rv`.
    Found { rv: Rv, value: String },
    /// A list at revision `rv` found these keys, each with the revision and
    /// value it holds; every other key is absent.
    Listed { rv: Rv, items: Vec<Item> },
    /// A watch delivered `events` (in the order received), then ended.
    Watched { events: Vec<Event>, end: WatchEnd },
    /// No telling whether it took effect.
    Unknown { reason: String },
}

/// One object of a list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    pub key: String,
    pub rv: Rv,
    pub value: String,
}

/// The kinds of change a watch delivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventKind {
    Added,
    Modified,
    Deleted,
}

/// One watch event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub kind: EventKind,
    pub key: String,
    /// The revision of the change (a deletion's own revision for `Deleted`).
    pub rv: Rv,
    /// The value written (the last value held, for `Deleted`).
    pub value: String,
    /// When the client received it.
    pub at: Time,
}

/// Why a watch ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum WatchEnd {
    /// The client stopped reading.
    Stopped,
    /// The client stopped reading once it had seen every change up to this
    /// revision, which it knew to exist: everything from the start up to it
    /// must have been delivered.
    CaughtUp { through: Rv },
    /// A clean `410 Gone` (the start is older than the retained history).
    Gone,
    /// The stream broke or the server closed it.
    Broken { reason: String },
}

impl Call {
    /// The key it is about, `None` for lists and watches.
    pub fn key(&self) -> Option<&str> {
        match self {
            Call::Create { key, .. }
            | Call::Update { key, .. }
            | Call::Delete { key, .. }
            | Call::Get { key } => Some(key),
            Call::List | Call::Watch { .. } => None,
        }
    }

    /// Whether it may change the store.
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            Call::Create { .. } | Call::Update { .. } | Call::Delete { .. }
        )
    }
}

/// A whole history.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    pub ops: Vec<Operation>,
}

impl History {
    pub fn new(ops: Vec<Operation>) -> History {
        History { ops }
    }

    /// Every key named by an operation or seen in a list or watch.
    pub fn keys(&self) -> std::collections::BTreeSet<String> {
        let mut keys = std::collections::BTreeSet::new();
        for op in &self.ops {
            if let Some(k) = op.call.key() {
                keys.insert(k.to_string());
            }
            match &op.outcome {
                Outcome::Listed { items, .. } => {
                    keys.extend(items.iter().map(|i| i.key.clone()));
                }
                Outcome::Watched { events, .. } => {
                    keys.extend(events.iter().map(|e| e.key.clone()));
                }
                _ => {}
            }
        }
        keys
    }

    /// The history as JSON, to keep a failing run.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// A history written by [`History::to_json`].
    pub fn from_json(text: &str) -> serde_json::Result<History> {
        serde_json::from_str(text)
    }
}

/// Collects the operations of concurrent clients; cheap to clone (one
/// shared log). Times are taken when [`Recorder::invoke`] and
/// [`Pending::complete`] are called, so call them right around the request.
#[derive(Clone)]
pub struct Recorder {
    start: Instant,
    ops: Arc<Mutex<Vec<Operation>>>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder {
            start: Instant::now(),
            ops: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Now, on the history's clock.
    pub fn now(&self) -> Time {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Notes that `client` sends `call` now.
    pub fn invoke(&self, client: u32, call: Call) -> Pending {
        Pending {
            recorder: self.clone(),
            client,
            invoke: self.now(),
            call,
        }
    }

    /// Everything recorded so far, in order of completion.
    pub fn history(&self) -> History {
        History {
            ops: self.ops.lock().map(|ops| ops.clone()).unwrap_or_default(),
        }
    }

    fn push(&self, op: Operation) {
        if let Ok(mut ops) = self.ops.lock() {
            ops.push(op);
        }
    }
}

/// An operation sent and not yet answered.
pub struct Pending {
    recorder: Recorder,
    client: u32,
    invoke: Time,
    call: Call,
}

impl Pending {
    /// When it was sent.
    pub fn invoked_at(&self) -> Time {
        self.invoke
    }

    /// Records the answer, received now.
    pub fn complete(self, outcome: Outcome) {
        let now = self.recorder.now();
        self.finish(Some(now), outcome);
    }

    /// Records that no answer came: its effect, if any, may happen at any
    /// later time.
    pub fn never_answered(self, reason: impl Into<String>) {
        self.finish(
            None,
            Outcome::Unknown {
                reason: reason.into(),
            },
        );
    }

    /// Records the answer with a given completion time (`None`: never).
    pub fn finish(self, complete: Option<Time>, outcome: Outcome) {
        self.recorder.push(Operation {
            client: self.client,
            invoke: self.invoke,
            complete,
            call: self.call,
            outcome,
        });
    }
}
