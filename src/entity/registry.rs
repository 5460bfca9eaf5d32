//! Entity names to handles. Names compare case-insensitively, as in Service Bus.
//!
//! The config file's entities are started at start (design.md D6), with those created at run
//! time ([`Registry::create`]) that the file does not declare: their declarations are stored
//! (`Store::set_declaration`) and come back at every start until [`Registry::delete`]. The
//! file is the declaration of its entities: at start its settings apply to them. Temporary
//! queues and topics (`wire::temporary`) are never stored as declared, and what a crash left of
//! them is dropped at start.
//!
//! A topic the file declares has, at start, the file's subscriptions plus those created at run
//! time that the file does not declare, with their stored settings: for such a topic the store
//! keeps a topic declaration holding only those (see [`Record`]). The file's settings win for
//! the topic and for every subscription it declares, and a subscription it declares that was
//! deleted at run time comes back. A stored declaration for a name the file declares as a
//! queue is ignored.
//!
//! Each queue, topic and subscription has its creation and last update times
//! ([`EntityTimes`]), stored (`Store::set_times`): set when it is created, or at the first
//! start that sees it declared; moved by an update that changes its settings; forgotten when
//! it is deleted. In `memory` mode nothing is stored: they are this process's.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, RwLock};

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::clock::now_ms;
use crate::config::forwarding;
use crate::config::{
    Config, Declaration, Durability, PolicyConfig, SubscriptionConfig, TopicConfig,
};
use crate::entity::actor::{self, Commit};
use crate::entity::forward::Resolver;
use crate::entity::handle::{
    managed, management, Command, EntityError, EntityHandle, LaneId, Subscriptions,
};
use crate::entity::operation::{Answer, Operation};
use crate::entity::partition::Partition;
use crate::entity::partition::Routing;
use crate::entity::setup;
use crate::entity::setup::Parts;
use crate::store::{times_key, times_of_entity, EntityTimes, Flusher, Store, StoreError};
use crate::wire::temporary;

/// Why an entity could not be created or deleted.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// A queue or topic of that name exists (names compare ignoring case).
    #[error("the messaging entity '{0}' already exists")]
    Exists(String),
    /// No queue or topic of that name exists.
    #[error("the messaging entity '{0}' could not be found")]
    NotFound(String),
    /// The store failed.
    #[error("message store: {0}")]
    Store(#[from] StoreError),
    /// The change is not valid (a name or a setting out of the config file's bounds).
    #[error("{0}")]
    Invalid(String),
    /// The entity refused a management operation.
    #[error("{0}")]
    Refused(EntityError),
    /// The broker is stopping: no entity is created, changed or deleted any more.
    #[error("the broker is shutting down")]
    Stopping,
    /// Creating the entity would take the namespace past `broker.max_entities`.
    #[error("The maximum number of queues and topics in the namespace has been reached: {used} of {max} are in use (a partitioned entity counts as its partitions) and '{name}' would take {wanted}. QuotaType: EntityCount (QuotaExceeded)")]
    QuotaExceeded {
        /// The entity refused.
        name: String,
        /// What it would count for.
        wanted: usize,
        /// What the live entities count for.
        used: usize,
        /// `broker.max_entities`.
        max: usize,
    },
}

/// What starting an entity's actor takes.
#[derive(Clone)]
struct Launcher {
    store: Store,
    commit: Commit,
    shutdown: CancellationToken,
    tracker: TaskTracker,
    /// Finds the live entities by name, for the actors that forward.
    resolve: Resolver,
}

impl std::fmt::Debug for Launcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Launcher")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl Launcher {
    /// Recovers the entity's log and starts its actor; a partitioned entity's, one per
    /// partition (design.md D9).
    ///
    /// # Errors
    /// A [`StoreError`] when a log cannot be read back, or holds messages of another number
    /// of partitions than the entity has.
    fn launch(&self, declaration: &Declaration) -> Result<EntityHandle, StoreError> {
        self.launch_counting(declaration, &mut 0)
    }

    /// [`Launcher::launch`], adding the messages recovered to `recovered`.
    fn launch_counting(
        &self,
        declaration: &Declaration,
        recovered: &mut usize,
    ) -> Result<EntityHandle, StoreError> {
        let name = declaration.name();
        let partitions = declaration.partitions();
        let stray = self.store.stray_logs(name, partitions)?;
        if !stray.is_empty() {
            return Err(StoreError::Partitioning {
                entity: name.to_owned(),
                stray,
            });
        }
        let Some(count) = partitions else {
            let parts = self.parts(declaration, self.store.log(name)?, None)?;
            *recovered += parts.core.len();
            return Ok(actor::spawn(
                parts,
                self.commit.clone(),
                self.shutdown.child_token(),
                &self.tracker,
                self.resolve.clone(),
            ));
        };
        let deleted = Arc::new(AtomicBool::new(false));
        let mut mailboxes = Vec::with_capacity(usize::from(count));
        let mut first: Option<(Option<Subscriptions>, _)> = None;
        for partition in 0..count {
            let log = self.store.partition_log(name, partition)?;
            let numbers = first.as_ref().and_then(|(numbers, _)| numbers.as_ref());
            let mut parts = self.parts(declaration, log, numbers)?;
            *recovered += parts.core.len();
            parts.partition = Partition::numbered(partition);
            let numbers = parts.subscriptions.clone();
            let (mailbox, subscriptions) = actor::start(
                parts,
                self.commit.clone(),
                self.shutdown.child_token(),
                &self.tracker,
                self.resolve.clone(),
                deleted.clone(),
            );
            mailboxes.push(mailbox);
            first.get_or_insert((numbers, subscriptions));
        }
        let subscriptions = first.and_then(|(_, subscriptions)| subscriptions);
        let settings = setup::settings(declaration);
        let routing = Routing::new(
            settings.duplicate_window_ms.is_some(),
            settings.auto_delete_on_idle.map(crate::clock::millis),
        );
        Ok(EntityHandle::partitioned(
            name.to_owned(),
            mailboxes,
            deleted,
            subscriptions,
            routing,
        ))
    }

    /// The parts of the entity (or partition) `declaration` declares, recovered from `log`;
    /// a topic's partition takes the subscription numbers of its first partition (`imposed`).
    fn parts(
        &self,
        declaration: &Declaration,
        log: crate::store::EntityLog,
        imposed: Option<&Subscriptions>,
    ) -> Result<Parts, StoreError> {
        match declaration {
            Declaration::Queue(queue) => setup::queue(queue, log),
            Declaration::Topic(topic) => setup::topic(topic, log, imposed),
        }
    }
}

/// A live entity: its actor and what declared it.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Its actor.
    pub handle: EntityHandle,
    /// Its declaration as it runs (the file's, with what was created or changed at run time).
    pub declaration: Declaration,
    /// What the config file declares of it; `None` for an entity created at run time. The
    /// file's part is never stored: changes made to it at run time last until the next start.
    /// A subscription a reloaded file stops declaring stays in it while it lives, so that it
    /// is not stored as one created at run time: it goes at the next start, as the entities the
    /// file drops do.
    pub file: Option<Declaration>,
}

/// What the store keeps of a live entity, by the entity's name.
#[derive(Debug)]
enum Record {
    /// This declaration: the whole of an entity created at run time; for a topic the config
    /// file declares, the topic with only the subscriptions the file does not declare
    /// (created at run time; its own settings are ignored at start, where the file's apply).
    Keep(Box<Declaration>),
    /// Nothing: a topic the file declares with no subscription created at run time.
    Forget,
    /// What is stored stays (a queue the file declares: a record of it is ignored at start;
    /// a temporary entity, of which nothing is stored).
    Leave,
}

impl Record {
    /// The record of a live entity running `live`, of which the config file declares `file`.
    fn of(file: Option<&Declaration>, live: &Declaration) -> Record {
        match (file, live) {
            // A temporary queue or topic lives only as long as its connection.
            (None, _) if temporary::is_temporary(live.name()) => Record::Leave,
            (None, _) => Record::Keep(Box::new(live.clone())),
            (Some(Declaration::Topic(file)), Declaration::Topic(live)) => {
                let added: Vec<SubscriptionConfig> = live
                    .subscriptions
                    .iter()
                    .filter(|subscription| !declares(file, &subscription.name))
                    .cloned()
                    .collect();
                match added.is_empty() {
                    true => Record::Forget,
                    // The file's keys are never stored: it declares them at every start.
                    false => Record::Keep(Box::new(Declaration::Topic(TopicConfig {
                        subscriptions: added,
                        shared_access_policies: Vec::new(),
                        ..live.clone()
                    }))),
                }
            }
            (Some(_), _) => Record::Leave,
        }
    }

    /// Writes it under the entity's lower-cased `name`. Blocks while the store flushes.
    fn write(&self, store: &Store, name: &str) -> Result<(), StoreError> {
        match self {
            Record::Keep(declaration) => store.set_declaration(name, Some(&declaration.to_toml())),
            Record::Forget => store.set_declaration(name, None),
            Record::Leave => Ok(()),
        }
    }
}

/// Whether a topic declares a subscription of that name (ignoring case).
fn declares(topic: &TopicConfig, subscription: &str) -> bool {
    topic
        .subscriptions
        .iter()
        .any(|declared| declared.name.eq_ignore_ascii_case(subscription))
}

/// The [`times_key`]s of an entity and of its subscriptions.
fn times_keys(declaration: &Declaration) -> Vec<String> {
    let mut keys = vec![times_key(declaration.name(), None)];
    if let Declaration::Topic(topic) = declaration {
        let subscriptions = topic.subscriptions.iter();
        keys.extend(subscriptions.map(|s| times_key(&topic.name, Some(&s.name))));
    }
    keys
}

/// The [`times_key`]s of what an update from `before` to `after` changes: the entity when its
/// own settings differ, and each subscription whose settings (rules included) differ.
fn changed_keys(before: &Declaration, after: &Declaration) -> Vec<String> {
    let (Declaration::Topic(before), Declaration::Topic(after)) = (before, after) else {
        return match before == after {
            true => Vec::new(),
            false => vec![times_key(after.name(), None)],
        };
    };
    let own = |topic: &TopicConfig| TopicConfig {
        subscriptions: Vec::new(),
        ..topic.clone()
    };
    let mut keys = Vec::new();
    if own(before) != own(after) {
        keys.push(times_key(&after.name, None));
    }
    for subscription in &after.subscriptions {
        let same_name =
            |old: &&SubscriptionConfig| old.name.eq_ignore_ascii_case(&subscription.name);
        if before.subscriptions.iter().find(same_name) != Some(subscription) {
            keys.push(times_key(&after.name, Some(&subscription.name)));
        }
    }
    keys
}

/// Times created at `now_ms` for `keys`.
fn created(keys: Vec<String>, now_ms: i64) -> Vec<(String, Option<EntityTimes>)> {
    let times = Some(EntityTimes::created(now_ms));
    keys.into_iter().map(|key| (key, times)).collect()
}

/// A [`Resolver`] over the live entities, holding them weakly.
fn resolver(live: &Arc<RwLock<HashMap<String, Entry>>>) -> Resolver {
    let live = Arc::downgrade(live);
    Arc::new(move |name: &str| {
        let live = live.upgrade()?;
        let entities = live
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        entities
            .get(&name.to_lowercase())
            .map(|entry| entry.handle.clone())
    })
}

/// A stored declaration, read back.
fn parse_stored(name: &str, text: &str) -> Result<Declaration, StoreError> {
    Declaration::parse(text, &format!("<stored declaration of {name}>"))
        .map_err(|e| StoreError::Sled(format!("stored declaration of {name}: {e}")))
}

/// Every live entity, by lower-cased name.
#[derive(Debug)]
pub struct Registry {
    /// Shared, weakly, with the actors that forward ([`Resolver`]), so that they find their
    /// targets as they are now without keeping one another alive.
    entities: Arc<RwLock<HashMap<String, Entry>>>,
    /// The times of each live entity and subscription, by [`times_key`], as stored. Never
    /// locked together with `entities`.
    times: RwLock<HashMap<String, EntityTimes>>,
    /// `None` once the broker stops ([`Registry::close`]), so that the store is let go.
    launcher: std::sync::Mutex<Option<Launcher>>,
    /// `broker.max_entities`, as the broker started with it.
    max_entities: usize,
    /// The messages the start recovered from the store, in every lane of every entity.
    recovered: usize,
}

impl Registry {
    /// Recovers and starts an actor for every queue and topic the config declares, and for
    /// every entity created at run time that it does not.
    ///
    /// # Errors
    /// A [`StoreError`] when an entity's log cannot be opened or read back, or a stored
    /// declaration no longer reads.
    pub fn start(
        config: &Config,
        store: &Store,
        flusher: Option<&Flusher>,
        shutdown: &CancellationToken,
        tracker: &TaskTracker,
    ) -> Result<Self, StoreError> {
        let commit = match (store.durability(), flusher) {
            (Durability::Sync, Some(flusher)) => Commit::AfterFlush(flusher.clone()),
            (_, flusher) => Commit::AfterWrite(flusher.cloned()),
        };
        // What a crash (or a stop that did not get to delete them) left of temporaries.
        store.forget_entities_named(temporary::PREFIX)?;
        let shared = Arc::new(RwLock::new(HashMap::new()));
        let launcher = Launcher {
            store: store.clone(),
            commit,
            shutdown: shutdown.clone(),
            tracker: tracker.clone(),
            resolve: resolver(&shared),
        };
        // Each entity as it will run, with what the file declares of it.
        let mut declarations: Vec<(Declaration, Option<Declaration>)> = config
            .queues
            .iter()
            .cloned()
            .map(Declaration::Queue)
            .chain(config.topics.iter().cloned().map(Declaration::Topic))
            .map(|declaration| (declaration.clone(), Some(declaration)))
            .collect();
        for (name, text) in store.declarations()? {
            let declared = declarations
                .iter_mut()
                .find(|(d, _)| d.name().eq_ignore_ascii_case(&name));
            let Some((live, file)) = declared else {
                declarations.push((parse_stored(&name, &text)?, None));
                continue;
            };
            let Declaration::Topic(topic) = live else {
                tracing::info!(entity = %name, "stored and declared in the config as a queue: the config's settings apply");
                continue;
            };
            let Declaration::Topic(stored) = parse_stored(&name, &text)? else {
                tracing::warn!(entity = %name, "stored as a queue, declared in the config as a topic: the config applies");
                continue;
            };
            let mut shadowed = false;
            for subscription in stored.subscriptions {
                if declares(topic, &subscription.name) {
                    shadowed = true;
                    continue;
                }
                tracing::debug!(entity = %name, subscription = %subscription.name, "subscription created at run time: restored");
                topic.subscriptions.push(subscription);
            }
            if shadowed {
                // The file declares some of them now: they are no longer stored as created at
                // run time (and go at a start whose file drops them).
                Record::of(file.as_ref(), live).write(store, &name)?;
            }
        }
        // Times of entities no longer declared stay stored, for when they come back (with the
        // messages their logs keep).
        let mut times = store.times()?;
        let live: HashSet<String> = declarations
            .iter()
            .flat_map(|(declaration, _)| times_keys(declaration))
            .collect();
        times.retain(|key, _| live.contains(key));
        let first_seen = live.into_iter().filter(|key| !times.contains_key(key));
        let first_seen = created(first_seen.collect(), now_ms());
        store.set_times(&first_seen)?;
        for (key, value) in first_seen {
            times.extend(value.map(|value| (key, value)));
        }
        let mut entities = HashMap::new();
        let mut recovered = 0;
        // Launched before they are all live: an actor resolves its target at each attempt.
        for (declaration, file) in declarations {
            let handle = launcher.launch_counting(&declaration, &mut recovered)?;
            let entry = Entry {
                handle,
                declaration,
                file,
            };
            entities.insert(entry.declaration.name().to_lowercase(), entry);
        }
        *shared
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = entities;
        Ok(Self {
            entities: shared,
            times: RwLock::new(times),
            launcher: std::sync::Mutex::new(Some(launcher)),
            max_entities: config.broker.max_entities,
            recovered,
        })
    }

    /// The messages the start recovered from the store, in every lane of every entity.
    pub fn recovered_messages(&self) -> usize {
        self.recovered
    }

    /// Refuses a declaration to create or change at run time (the administration API) that
    /// would make the live entities forward where they cannot: to a missing target, in a
    /// loop, or along a chain too long ([`forwarding::check`]), naming the property at fault
    /// as Service Bus spells it. A reloaded file is checked as a whole when it is read.
    ///
    /// # Errors
    /// [`RegistryError::Invalid`] with the refusal.
    pub fn check_forwarding(&self, changed: &Declaration) -> Result<(), RegistryError> {
        let mut queues = Vec::new();
        let mut topics = Vec::new();
        // In name order, so that a loop is named the same way every time.
        let others = self
            .entries()
            .into_iter()
            .map(|entry| entry.declaration)
            .filter(|d| !d.name().eq_ignore_ascii_case(changed.name()));
        for declaration in others.chain([changed.clone()]) {
            match declaration {
                Declaration::Queue(queue) => queues.push(queue),
                Declaration::Topic(topic) => topics.push(topic),
            }
        }
        forwarding::check(&queues, &topics).map_err(|refusal| {
            let lane = match refusal.lane {
                forwarding::Lane::Queue(index) => queues[index].name.clone(),
                forwarding::Lane::Subscription(topic, subscription) => format!(
                    "{}/Subscriptions/{}",
                    topics[topic].name, topics[topic].subscriptions[subscription].name
                ),
            };
            let key = match refusal.key {
                forwarding::Key::ForwardTo => "ForwardTo",
                forwarding::Key::DeadLetters => "ForwardDeadLetteredMessagesTo",
            };
            RegistryError::Invalid(format!("{key} of '{lane}': {}", refusal.message))
        })
    }

    /// Lets go of the store and its flusher as the broker stops (the database closes when
    /// the last holder drops it): the entities stay readable, and nothing is created, changed
    /// or deleted any more.
    pub fn close(&self) {
        self.launcher().take();
    }

    fn launcher(&self) -> std::sync::MutexGuard<'_, Option<Launcher>> {
        self.launcher
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A launcher of its own (for work off the async runtime), unless the broker is stopping.
    fn launcher_handle(&self) -> Result<Launcher, RegistryError> {
        self.launcher().clone().ok_or(RegistryError::Stopping)
    }

    /// The store, unless the broker is stopping.
    fn store(&self) -> Result<Store, RegistryError> {
        self.launcher()
            .as_ref()
            .map(|launcher| launcher.store.clone())
            .ok_or(RegistryError::Stopping)
    }

    /// Creates and starts a queue or topic at run time; its declaration is stored first, so
    /// it comes back at the next start, unless `from_file` (a reloaded config file declares
    /// it: the file brings it back) or it is temporary (`wire::temporary`: it never comes
    /// back). Blocks while the store flushes.
    ///
    /// # Errors
    /// [`RegistryError::Exists`] when the name is taken, [`RegistryError::QuotaExceeded`] when
    /// the namespace is full (unless `from_file`), [`RegistryError::Store`] when the
    /// declaration cannot be stored or the log opened.
    pub fn create(
        &self,
        declaration: &Declaration,
        from_file: bool,
    ) -> Result<EntityHandle, RegistryError> {
        let name = declaration.name().to_lowercase();
        // The launcher's lock serializes creations; the map is locked only to insert, so that
        // address lookups do not wait for the store's flush and the log's recovery.
        let launcher = self.launcher();
        let launcher = launcher.as_ref().ok_or(RegistryError::Stopping)?;
        if self.read().contains_key(&name) {
            return Err(RegistryError::Exists(declaration.name().to_owned()));
        }
        if !from_file {
            self.check_quota(declaration)?;
        }
        if !from_file && !temporary::is_temporary(&name) {
            launcher
                .store
                .set_declaration(&name, Some(&declaration.to_toml()))?;
        }
        let times = created(times_keys(declaration), now_ms());
        launcher.store.set_times(&times)?;
        self.remember(times);
        let handle = launcher.launch(declaration)?;
        let entry = Entry {
            handle: handle.clone(),
            declaration: declaration.clone(),
            file: from_file.then(|| declaration.clone()),
        };
        self.write().insert(name, entry);
        tracing::info!(entity = declaration.name(), "created");
        Ok(handle)
    }

    /// [`Registry::create`] on a blocking thread, for the async tasks (connections, the
    /// administration endpoint): the runtime's threads never wait for the store's flush.
    ///
    /// # Errors
    /// As [`Registry::create`]; [`RegistryError::Stopping`] when the blocking pool is gone.
    pub async fn create_off_runtime(
        self: &Arc<Self>,
        declaration: &Declaration,
        from_file: bool,
    ) -> Result<EntityHandle, RegistryError> {
        let registry = Arc::clone(self);
        let declaration = declaration.clone();
        tokio::task::spawn_blocking(move || registry.create(&declaration, from_file))
            .await
            .unwrap_or(Err(RegistryError::Stopping))
    }

    /// Refuses `declaration` when the live entities and it would count for more than
    /// `broker.max_entities`, a partitioned entity counting as its partitions.
    fn check_quota(&self, declaration: &Declaration) -> Result<(), RegistryError> {
        let weight = |declaration: &Declaration| usize::from(declaration.partitions().unwrap_or(1));
        let used: usize = (self.read().values())
            .map(|entry| weight(&entry.declaration))
            .sum();
        let wanted = weight(declaration);
        match used + wanted > self.max_entities {
            true => Err(RegistryError::QuotaExceeded {
                name: declaration.name().to_owned(),
                wanted,
                used,
                max: self.max_entities,
            }),
            false => Ok(()),
        }
    }

    /// Applies a changed declaration to a live queue or topic (Service Bus's updatable
    /// settings: size, time to live, auto-delete, and a queue's lock duration, delivery limit
    /// and dead-lettering on expiry, and its subscriptions' settings) without losing messages,
    /// locks or links, and stores it; the update times of what changed move. Blocks while the
    /// store flushes.
    ///
    /// # Errors
    /// [`RegistryError::NotFound`] when no such entity exists, [`RegistryError::Store`] when
    /// the declaration cannot be stored.
    pub async fn update(&self, declaration: &Declaration) -> Result<(), RegistryError> {
        let Entry {
            handle,
            declaration: before,
            ..
        } = self
            .entry(declaration.name())
            .ok_or_else(|| RegistryError::NotFound(declaration.name().to_owned()))?;
        let (reply, applied) = oneshot::channel();
        let settings = setup::settings(declaration);
        let command = Command::Reconfigure {
            settings: Box::new(settings),
            reply,
        };
        if handle.post(command).await.is_err() || applied.await.is_err() {
            return Err(RegistryError::NotFound(declaration.name().to_owned()));
        }
        self.keep(declaration.clone()).await?;
        self.touch(changed_keys(&before, declaration)).await?;
        tracing::info!(entity = declaration.name(), "updated");
        Ok(())
    }

    /// Adds a subscription to a live topic, empty, with its declared rules (`$Default` when it
    /// declares none), and stores the topic's changed declaration (for a topic the config file
    /// declares, the subscriptions it does not: see [`Record`]), so that it comes back at every
    /// start until deleted.
    ///
    /// # Errors
    /// [`RegistryError::NotFound`] for no such topic, [`RegistryError::Exists`] for a taken
    /// name, [`RegistryError::Invalid`] for a declaration out of bounds.
    pub async fn add_subscription(
        &self,
        topic: &str,
        subscription: SubscriptionConfig,
    ) -> Result<(), RegistryError> {
        let entry = self
            .entry(topic)
            .ok_or_else(|| RegistryError::NotFound(topic.to_owned()))?;
        let Declaration::Topic(mut declaration) = entry.declaration.clone() else {
            return Err(RegistryError::NotFound(topic.to_owned()));
        };
        let path = format!("{}/Subscriptions/{}", declaration.name, subscription.name);
        if entry.handle.subscription(&subscription.name).is_some() {
            return Err(RegistryError::Exists(path));
        }
        declaration
            .subscriptions
            .retain(|s| !s.name.eq_ignore_ascii_case(&subscription.name));
        declaration.subscriptions.push(subscription.clone());
        // A temporary topic's name is the broker's own, out of the file's rules: the rest is
        // checked under a name that keeps them.
        let temporary = temporary::is_temporary(&declaration.name)
            .then(|| std::mem::replace(&mut declaration.name, "temporary".to_owned()));
        let mut changed =
            Declaration::parse(&Declaration::Topic(declaration).to_toml(), "the request")
                .map_err(|e| RegistryError::Invalid(e.to_string()))?;
        if let (Some(name), Declaration::Topic(topic)) = (temporary, &mut changed) {
            topic.name = name;
        }
        let (reply, added) = oneshot::channel();
        let subscription_name = subscription.name.clone();
        let command = Command::AddSubscription {
            number: None,
            config: Box::new(subscription),
            reply,
        };
        if entry.handle.post(command).await.is_err() {
            return Err(RegistryError::NotFound(topic.to_owned()));
        }
        match added.await {
            Ok(Ok(())) => {}
            Ok(Err(reason)) => return Err(RegistryError::Invalid(reason)),
            Err(_) => return Err(RegistryError::NotFound(topic.to_owned())),
        }
        let key = times_key(changed.name(), Some(&subscription_name));
        self.keep(changed).await?;
        self.save_times(created(vec![key], now_ms())).await
    }

    /// Deletes a subscription of a live topic with its messages and stores the topic's changed
    /// declaration.
    ///
    /// # Errors
    /// [`RegistryError::NotFound`] for no such topic or subscription.
    pub async fn remove_subscription(&self, topic: &str, name: &str) -> Result<(), RegistryError> {
        let path = format!("{topic}/Subscriptions/{name}");
        let entry = self
            .entry(topic)
            .ok_or_else(|| RegistryError::NotFound(path.clone()))?;
        let Declaration::Topic(mut declaration) = entry.declaration.clone() else {
            return Err(RegistryError::NotFound(path));
        };
        let (reply, removed) = oneshot::channel();
        let command = Command::RemoveSubscription {
            name: name.to_owned(),
            reply,
        };
        if entry.handle.post(command).await.is_err() || !matches!(removed.await, Ok(Ok(()))) {
            return Err(RegistryError::NotFound(path));
        }
        declaration
            .subscriptions
            .retain(|s| !s.name.eq_ignore_ascii_case(name));
        let key = times_key(&declaration.name, Some(name));
        self.keep(Declaration::Topic(declaration)).await?;
        self.save_times(vec![(key, None)]).await
    }

    /// Stores the record of a live entity's changed declaration ([`Record`]: nothing of what
    /// the config file declares, which the file declares again at the next start) and keeps
    /// the declaration with the entity.
    async fn keep(&self, declaration: Declaration) -> Result<(), RegistryError> {
        let name = declaration.name().to_lowercase();
        let file = self.read().get(&name).and_then(|entry| entry.file.clone());
        self.store_record(&name, Record::of(file.as_ref(), &declaration))
            .await?;
        if let Some(entry) = self.write().get_mut(&name) {
            entry.declaration = declaration;
        }
        Ok(())
    }

    /// Moves the update time of each of `keys` to now.
    async fn touch(&self, keys: Vec<String>) -> Result<(), RegistryError> {
        let now = now_ms();
        let changes = {
            let times = self.times_read();
            let touched = keys.into_iter().map(|key| {
                let created_ms = times.get(&key).map_or(now, |kept| kept.created_ms);
                let updated_ms = now;
                (
                    key,
                    Some(EntityTimes {
                        created_ms,
                        updated_ms,
                    }),
                )
            });
            touched.collect()
        };
        self.save_times(changes).await
    }

    /// Stores changed times, off the async runtime (it may wait for the flush), and keeps
    /// them.
    async fn save_times(
        &self,
        changes: Vec<(String, Option<EntityTimes>)>,
    ) -> Result<(), RegistryError> {
        if changes.is_empty() {
            return Ok(());
        }
        let store = self.store()?;
        let stored = changes.clone();
        tokio::task::spawn_blocking(move || store.set_times(&stored))
            .await
            .map_err(|e| StoreError::Sled(format!("storing times: {e}")))??;
        self.remember(changes);
        Ok(())
    }

    /// Keeps changed times (already stored).
    fn remember(&self, changes: Vec<(String, Option<EntityTimes>)>) {
        let mut times = self.times_write();
        for (key, value) in changes {
            match value {
                Some(value) => times.insert(key, value),
                None => times.remove(&key),
            };
        }
    }

    /// Writes an entity's record, off the async runtime (it waits for the flush).
    async fn store_record(&self, name: &str, record: Record) -> Result<(), RegistryError> {
        let store = self.store()?;
        let key = name.to_owned();
        tokio::task::spawn_blocking(move || record.write(&store, &key))
            .await
            .map_err(|e| StoreError::Sled(format!("storing a declaration: {e}")))??;
        Ok(())
    }

    /// Takes `file` as what the config file now declares of a live entity (a reload applied
    /// it): the subscriptions it declares stop being stored as created at run time. Those it
    /// stopped declaring are not stored either while they live (they were not created at run
    /// time): they go at the next start, as the entities the file drops do. Nothing happens
    /// for an entity that does not exist or whose file declaration is the same. Blocks while
    /// the store flushes.
    ///
    /// # Errors
    /// [`RegistryError::Store`] when its record cannot be stored.
    pub async fn declare(&self, file: &Declaration) -> Result<(), RegistryError> {
        let name = file.name().to_lowercase();
        let record = {
            let mut entities = self.write();
            let Some(entry) = entities.get_mut(&name) else {
                return Ok(());
            };
            let mut file = file.clone();
            if let (
                Some(Declaration::Topic(before)),
                Declaration::Topic(now),
                Declaration::Topic(live),
            ) = (&entry.file, &mut file, &entry.declaration)
            {
                let dropped: Vec<SubscriptionConfig> = before
                    .subscriptions
                    .iter()
                    .filter(|s| !declares(now, &s.name) && declares(live, &s.name))
                    .cloned()
                    .collect();
                now.subscriptions.extend(dropped);
            }
            if entry.file.as_ref() == Some(&file) {
                return Ok(());
            }
            let record = Record::of(Some(&file), &entry.declaration);
            entry.file = Some(file);
            record
        };
        self.store_record(&name, record).await
    }

    /// Performs a management operation (`add-rule`, `remove-rule`, `enumerate-rules`, ...) on
    /// a subscription of a topic, as its `$management` node would.
    ///
    /// # Errors
    /// [`RegistryError::NotFound`] for no such topic or subscription (named by its path),
    /// [`RegistryError::Refused`] with the entity's refusal.
    pub async fn manage(
        &self,
        topic: &str,
        subscription: &str,
        operation: Operation,
    ) -> Result<Answer, RegistryError> {
        self.operate(&format!("{topic}/Subscriptions/{subscription}"), operation)
            .await
    }

    /// A queue's or subscription's lane by its path (`queue`, `topic/Subscriptions/name`, each
    /// with `/$DeadLetterQueue` for its dead-letter queue; names ignore case), with its entity.
    pub fn lane(&self, path: &str) -> Option<(EntityHandle, LaneId)> {
        let (path, dead_letter) = match path.rsplit_once('/') {
            Some((owner, last)) if last.eq_ignore_ascii_case("$DeadLetterQueue") => (owner, true),
            _ => (path, false),
        };
        let mut parts = path.split('/');
        let (entity, keyword, subscription) = (parts.next()?, parts.next(), parts.next());
        if parts.next().is_some() {
            return None;
        }
        let handle = self.lookup(entity)?;
        let subscription = match (keyword, subscription) {
            (None, None) if !handle.is_topic() => 0,
            (Some(keyword), Some(name)) if keyword.eq_ignore_ascii_case("Subscriptions") => {
                handle.subscription(name)?
            }
            _ => return None,
        };
        let lane = LaneId {
            subscription,
            dead_letter,
        };
        Some((handle, lane))
    }

    /// Performs a management operation on the lane at `path` (see [`Registry::lane`]), as its
    /// `$management` node would.
    ///
    /// # Errors
    /// [`RegistryError::NotFound`] for no such queue, subscription or dead-letter queue (named
    /// by its path), [`RegistryError::Refused`] with the entity's refusal.
    pub async fn operate(&self, path: &str, operation: Operation) -> Result<Answer, RegistryError> {
        let missing = || RegistryError::NotFound(path.to_owned());
        let (handle, lane) = self.lane(path).ok_or_else(missing)?;
        let (command, events) = management(lane, operation);
        handle.post(command).await.map_err(|_| missing())?;
        match managed(events).await {
            Ok(result) => result.map_err(RegistryError::Refused),
            Err(()) => Err(missing()),
        }
    }

    /// Deletes a queue or topic with its messages: its links get `amqp:not-found`, its
    /// address stops resolving, and its record is forgotten (with it, the subscriptions
    /// created at run time on a topic the file declares). A config-declared entity comes back,
    /// empty, at the next start (the file declares it).
    ///
    /// # Errors
    /// [`RegistryError::NotFound`] when no such entity exists, [`RegistryError::Store`] when
    /// its declaration cannot be forgotten.
    pub async fn delete(&self, name: &str) -> Result<(), RegistryError> {
        let handle = self
            .write()
            .remove(&name.to_lowercase())
            .ok_or_else(|| RegistryError::NotFound(name.to_owned()))?
            .handle;
        let (reply, deleted) = oneshot::channel();
        if handle.post(Command::Delete { reply }).await.is_ok() {
            // An entity that went meanwhile (auto-delete) has nothing left to drop.
            let _ = deleted.await;
        }
        tracing::info!(entity = name, "deleted");
        self.forget_declaration(name).await
    }

    /// Brings the namespace back to what `declared` (the running config's entities) declares,
    /// as `[testing] reset` asks: every entity is deleted with its messages (dead-lettered,
    /// deferred, scheduled), session states and duplicate-detection ids, entities created at
    /// run time (and subscriptions created at run time) are gone, and the declared ones are
    /// created again, empty, numbering from 1. Links attached to any entity are detached
    /// with `amqp:not-found`, as by a deletion; connections stay. Durable when it returns.
    /// Returns the entities it recreated.
    ///
    /// # Errors
    /// [`RegistryError::Store`] when a record cannot be stored or an entity's log not
    /// recreated (the broker should then be restarted: the namespace may be partly reset).
    pub async fn reset(&self, declared: Vec<Declaration>) -> Result<usize, RegistryError> {
        let removed: Vec<Entry> = self.write().drain().map(|(_, entry)| entry).collect();
        let deletions = removed.into_iter().map(|entry| async move {
            let (reply, deleted) = oneshot::channel();
            if entry.handle.post(Command::Delete { reply }).await.is_ok() {
                let _ = deleted.await;
            }
        });
        futures_util::future::join_all(deletions).await;
        let store = self.store()?;
        let created_now = EntityTimes::created(now_ms());
        let times: Vec<(String, EntityTimes)> = (declared.iter())
            .flat_map(times_keys)
            .map(|key| (key, created_now))
            .collect();
        let kept = times.clone();
        let launched = {
            let launcher = self.launcher_handle()?;
            tokio::task::spawn_blocking(move || {
                store.reset_records(&kept)?;
                declared
                    .into_iter()
                    .map(|declaration| Ok((launcher.launch(&declaration)?, declaration)))
                    .collect::<Result<Vec<_>, StoreError>>()
            })
            .await
            .map_err(|e| StoreError::Sled(format!("resetting: {e}")))??
        };
        *self.times_write() = times.into_iter().collect();
        let count = launched.len();
        let mut entities = self.write();
        for (handle, declaration) in launched {
            let entry = Entry {
                handle,
                file: Some(declaration.clone()),
                declaration,
            };
            entities.insert(entry.declaration.name().to_lowercase(), entry);
        }
        Ok(count)
    }

    /// Moves the broker's clock forward by `by_ms` (a controlled test clock): the time reached
    /// is on disk first, so a restart starts there or later, then every entity does what is
    /// due at it (activates schedules, expires locks, session locks and messages,
    /// dead-letters what that dead-letters, dispatches). Answers the broker's time once every
    /// entity has. Idleness is the reaper's ([`crate::reaper::reap_once`]).
    ///
    /// # Errors
    /// [`RegistryError::Store`] when the time cannot be stored (the clock has not moved).
    pub async fn move_clock(&self, by_ms: i64) -> Result<i64, RegistryError> {
        let store = self.store()?;
        let reached_ms = now_ms().saturating_add(by_ms);
        tokio::task::spawn_blocking(move || store.set_test_clock(reached_ms))
            .await
            .map_err(|e| StoreError::Sled(format!("storing the clock: {e}")))??;
        let now = crate::clock::advance(by_ms);
        let ticks = self.handles().into_iter().map(|entity| async move {
            let (reply, ticked) = oneshot::channel();
            if entity.post(Command::Tick { reply }).await.is_ok() {
                let _ = ticked.await;
            }
        });
        futures_util::future::join_all(ticks).await;
        Ok(now)
    }

    /// Forgets an entity that deleted itself (auto-delete on idle): its address answers
    /// `amqp:not-found` from now on, and one created at run time does not come back.
    ///
    /// # Errors
    /// [`RegistryError::Store`] when its declaration cannot be forgotten.
    pub async fn forget(&self, name: &str) -> Result<(), RegistryError> {
        self.write().remove(&name.to_lowercase());
        self.forget_declaration(name).await
    }

    /// Forgets a deleted entity's record and its times (and its subscriptions').
    async fn forget_declaration(&self, name: &str) -> Result<(), RegistryError> {
        self.store_record(&name.to_lowercase(), Record::Forget)
            .await?;
        let store = self.store()?;
        let entity = name.to_owned();
        tokio::task::spawn_blocking(move || store.forget_times(&entity))
            .await
            .map_err(|e| StoreError::Sled(format!("forgetting times: {e}")))??;
        self.times_write()
            .retain(|key, _| !times_of_entity(key, name));
        Ok(())
    }

    /// The message store's size on disk in bytes (0 in `memory` mode or once stopping).
    pub fn store_bytes(&self) -> u64 {
        self.store().map_or(0, |store| store.size_on_disk())
    }

    /// The entity with this name, compared case-insensitively.
    pub fn lookup(&self, name: &str) -> Option<EntityHandle> {
        self.read()
            .get(&name.to_lowercase())
            .map(|entry| entry.handle.clone())
    }

    /// When a queue or topic (`subscription` `None`), or one of a topic's subscriptions, was
    /// created and last updated; `None` for one that does not exist.
    pub fn times(&self, entity: &str, subscription: Option<&str>) -> Option<EntityTimes> {
        self.times_read()
            .get(&times_key(entity, subscription))
            .copied()
    }

    /// The entity with this name with its declaration, compared case-insensitively.
    pub fn entry(&self, name: &str) -> Option<Entry> {
        self.read().get(&name.to_lowercase()).cloned()
    }

    /// Every live entity with its declaration, by lower-cased name.
    pub fn entries(&self) -> Vec<Entry> {
        let mut entries: Vec<Entry> = self.read().values().cloned().collect();
        entries.sort_by_key(|entry| entry.declaration.name().to_lowercase());
        entries
    }

    /// The declaration of `topic`'s subscription `name`, compared case-insensitively.
    pub fn subscription_config(&self, topic: &str, name: &str) -> Option<SubscriptionConfig> {
        subscription_named(self.entry(topic)?.declaration, name).map(|(_, found)| found)
    }

    /// Every topic with a subscription named `name` (compared case-insensitively), by name,
    /// with the subscription's declaration.
    pub fn topics_with_subscription(&self, name: &str) -> Vec<(String, SubscriptionConfig)> {
        (self.entries().into_iter())
            .filter_map(|entry| subscription_named(entry.declaration, name))
            .collect()
    }

    /// Deletes the subscriptions `doomed` picks by name, of every topic (at start, the JMS
    /// non-durable subscriptions a stopped broker left: they live only as long as their
    /// links). Returns how many went.
    ///
    /// # Errors
    /// The first deletion the store refused.
    pub async fn remove_subscriptions_named(
        &self,
        doomed: impl Fn(&str) -> bool,
    ) -> Result<usize, RegistryError> {
        let mut removed = 0;
        for entry in self.entries() {
            let Declaration::Topic(topic) = &entry.declaration else {
                continue;
            };
            for subscription in topic.subscriptions.iter().filter(|s| doomed(&s.name)) {
                self.remove_subscription(&topic.name, &subscription.name)
                    .await?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// The shared access policies of the live queues and topics, each with its entity's
    /// lower-cased name (what [`crate::auth::Policies`] verifies entity-level credentials
    /// with).
    pub fn entity_policies(&self) -> Vec<(String, PolicyConfig)> {
        let entities = self.read();
        let declared = entities.iter().flat_map(|(name, entry)| {
            let policies = match &entry.declaration {
                Declaration::Queue(queue) => &queue.shared_access_policies,
                Declaration::Topic(topic) => &topic.shared_access_policies,
            };
            policies
                .iter()
                .map(move |policy| (name.clone(), policy.clone()))
        });
        declared.collect()
    }

    /// Every live entity, for the background ticks.
    pub fn handles(&self) -> Vec<EntityHandle> {
        self.read()
            .values()
            .map(|entry| entry.handle.clone())
            .collect()
    }

    /// How many entities exist.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether no entity exists.
    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Entry>> {
        // The map is never left half-changed, so a panic elsewhere cannot poison its meaning.
        self.entities
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Entry>> {
        self.entities
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn times_read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, EntityTimes>> {
        // As for the entities: never left half-changed.
        self.times
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn times_write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, EntityTimes>> {
        self.times
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A topic's name and its subscription `name` (compared case-insensitively), when `declared`
/// is a topic with one.
fn subscription_named(declared: Declaration, name: &str) -> Option<(String, SubscriptionConfig)> {
    let Declaration::Topic(topic) = declared else {
        return None;
    };
    let found = (topic.subscriptions.into_iter())
        .find(|subscription| subscription.name.eq_ignore_ascii_case(name))?;
    Some((topic.name, found))
}

#[cfg(test)]
mod tests;
