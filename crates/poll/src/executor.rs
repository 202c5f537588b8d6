//! A small single-thread executor for tools and tests, built for polled I/O: when no task is
//! ready it runs the reactors (e.g. [`crate::AsyncQueuePair::poll_completions`]) instead of
//! sleeping, because completions only arrive when someone polls for them.
//!
//! - [`block_on`] drives one future with one reactor closure.
//! - [`LocalExecutor`] runs many spawned `!Send` tasks (say, a queue-depth-N loop written as N
//!   tasks) and calls its reactors on every turn of its loop.
//!
//! Wakers are `Arc`s implementing `std::task::Wake` (wakers must be `Send + Sync`, so a
//! timer or another thread may wake a task): waking pushes the task id onto a ready queue
//! once (a per-task flag stops duplicates). The executor parks its thread only when it has no
//! reactors and nothing is ready; with reactors it busy-polls, yielding the CPU after
//! [`IDLE_SPINS_BEFORE_YIELD`] idle turns in a row.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

/// Consecutive idle turns (nothing ready, reactors found nothing) spent spinning before the
/// executor starts yielding its time slice on each idle turn.
pub const IDLE_SPINS_BEFORE_YIELD: u32 = 64;

/// Backs off on idle turns: spin first (completions usually arrive within microseconds),
/// then yield so a co-scheduled device thread (such as the emulator's) can run.
#[derive(Default)]
struct Backoff {
    idle: u32,
}

impl Backoff {
    fn idle(&mut self) {
        if self.idle < IDLE_SPINS_BEFORE_YIELD {
            self.idle += 1;
            std::hint::spin_loop();
        } else {
            thread::yield_now();
        }
    }

    fn reset(&mut self) {
        self.idle = 0;
    }
}

/// Waker of [`block_on`]: a flag.
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }
}

/// Runs `future` to completion on this thread. Between polls of the future (which happen only
/// after it was woken) it calls `reactor`, which should poll for completions and return how
/// many it found; it never sleeps.
///
/// With an [`crate::AsyncQueuePair`] `aqp`, the reactor is `aqp.reactor()`:
/// `block_on(aqp.read(&ns, lba, blocks, buf), aqp.reactor())`. Any closure works:
///
/// ```
/// use std::{cell::RefCell, rc::Rc, task::{Poll, Waker}};
///
/// // A future that needs three wake-ups, and a reactor that "completes" whatever waits.
/// let parked: Rc<RefCell<Option<Waker>>> = Rc::default();
/// let mut left = 3;
/// let future = {
///     let parked = parked.clone();
///     std::future::poll_fn(move |cx| {
///         if left == 0 {
///             return Poll::Ready("done");
///         }
///         left -= 1;
///         *parked.borrow_mut() = Some(cx.waker().clone());
///         Poll::Pending
///     })
/// };
/// let reactor = || match parked.borrow_mut().take() {
///     Some(waker) => {
///         waker.wake();
///         1
///     }
///     None => 0,
/// };
/// assert_eq!(nvme_poll::block_on(future, reactor), "done");
/// /// ```
pub fn block_on<F: Future>(future: F, mut reactor: impl FnMut() -> usize) -> F::Output {
    let mut future = pin!(future);
    let flag = Arc::new(Flag(AtomicBool::new(true)));
    let waker = Waker::from(flag.clone());
    let mut cx = Context::from_waker(&waker);
    let mut backoff = Backoff::default();
    loop {
        if flag.0.swap(false, Ordering::AcqRel) {
            if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
                return output;
            }
            backoff.reset();
        }
        if reactor() == 0 && !flag.0.load(Ordering::Acquire) {
            backoff.idle();
        } else {
            backoff.reset();
        }
    }
}

/// Names a task of a [`LocalExecutor`] (slot index and generation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TaskId {
    index: u32,
    generation: u32,
}

/// The id [`LocalExecutor::block_on`] gives its main future (never a slot index).
const MAIN: TaskId = TaskId {
    index: u32::MAX,
    generation: 0,
};

/// Ready task ids, shared with the wakers.
struct ReadyQueue {
    ids: Mutex<VecDeque<TaskId>>,
    /// The executor thread is parked (or about to park) waiting for a wake.
    parked: AtomicBool,
    thread: Thread,
}

impl ReadyQueue {
    fn lock(&self) -> MutexGuard<'_, VecDeque<TaskId>> {
        // A panic while holding the lock cannot leave the queue inconsistent (push/pop only).
        self.ids
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn push(&self, id: TaskId) {
        self.lock().push_back(id);
        // Ordering: the push is visible (mutex release) before `parked` is read; the executor
        // sets `parked` before it looks at the queue, so one of the two sees the other.
        if self.parked.load(Ordering::SeqCst) {
            self.thread.unpark();
        }
    }
}

/// Waker of one task.
struct TaskWaker {
    id: TaskId,
    /// The id is in the ready queue (cleared just before the task is polled).
    queued: AtomicBool,
    queue: Arc<ReadyQueue>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.queued.swap(true, Ordering::AcqRel) {
            self.queue.push(self.id);
        }
    }
}

struct Task {
    future: Pin<Box<dyn Future<Output = ()>>>,
    state: Arc<TaskWaker>,
    waker: Waker,
}

struct TaskSlot {
    generation: u32,
    task: Option<Task>,
}

/// A single-thread executor for `!Send` tasks that drives polled I/O in its idle loop.
pub struct LocalExecutor {
    tasks: Vec<TaskSlot>,
    free: Vec<u32>,
    live: usize,
    queue: Arc<ReadyQueue>,
    reactors: Vec<Box<dyn FnMut() -> usize>>,
}

impl Default for LocalExecutor {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for LocalExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalExecutor")
            .field("tasks", &self.live)
            .field("reactors", &self.reactors.len())
            .finish_non_exhaustive()
    }
}

impl LocalExecutor {
    /// An executor bound to the calling thread (it is `!Send`).
    pub fn new() -> Self {
        Self {
            tasks: Vec::new(),
            free: Vec::new(),
            live: 0,
            queue: Arc::new(ReadyQueue {
                ids: Mutex::new(VecDeque::new()),
                parked: AtomicBool::new(false),
                thread: thread::current(),
            }),
            reactors: Vec::new(),
        }
    }

    /// Adds a reactor: called on every turn of the run loop; returns how much it completed.
    pub fn add_reactor(&mut self, reactor: impl FnMut() -> usize + 'static) {
        self.reactors.push(Box::new(reactor));
    }

    /// Adds `aqp`'s completion polling as a reactor.
    pub fn drive<Q: nvme_driver::IoQueue + 'static>(&mut self, aqp: &crate::AsyncQueuePair<Q>) {
        self.add_reactor(aqp.reactor());
    }

    /// Spawns a task; it first runs on the next [`LocalExecutor::run`] or
    /// [`LocalExecutor::block_on`].
    pub fn spawn(&mut self, future: impl Future<Output = ()> + 'static) -> TaskId {
        let (index, generation) = match self.free.pop() {
            Some(index) => (index, self.tasks[index as usize].generation),
            None => {
                let index = u32::try_from(self.tasks.len())
                    .ok()
                    .filter(|&i| i != MAIN.index)
                    .expect("too many tasks");
                self.tasks.push(TaskSlot {
                    generation: 0,
                    task: None,
                });
                (index, 0)
            }
        };
        let id = TaskId { index, generation };
        let state = Arc::new(TaskWaker {
            id,
            queued: AtomicBool::new(true),
            queue: self.queue.clone(),
        });
        let waker = Waker::from(state.clone());
        self.tasks[index as usize].task = Some(Task {
            future: Box::pin(future),
            state,
            waker,
        });
        self.live += 1;
        self.queue.push(id);
        id
    }

    /// Tasks spawned and not finished.
    pub fn len(&self) -> usize {
        self.live
    }

    /// Whether every spawned task has finished.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Whether task `id` is still running.
    pub fn is_running(&self, id: TaskId) -> bool {
        self.tasks
            .get(id.index as usize)
            .is_some_and(|s| s.generation == id.generation && s.task.is_some())
    }

    /// Runs until every spawned task has finished.
    pub fn run(&mut self) {
        self.block_on_inner(std::future::poll_fn(|_| Poll::<()>::Pending), true);
    }

    /// Runs `future` (and the spawned tasks meanwhile) until `future` completes; unfinished
    /// tasks stay for a later call.
    pub fn block_on<F: Future>(&mut self, future: F) -> F::Output {
        self.block_on_inner(future, false)
            .expect("the main future ran to completion")
    }

    /// Runs the loop; with `until_tasks_done`, also returns (`None`) once no task is left.
    fn block_on_inner<F: Future>(
        &mut self,
        future: F,
        until_tasks_done: bool,
    ) -> Option<F::Output> {
        let mut future = pin!(future);
        let main = Arc::new(TaskWaker {
            id: MAIN,
            queued: AtomicBool::new(true),
            queue: self.queue.clone(),
        });
        let main_waker = Waker::from(main.clone());
        self.queue.push(MAIN);
        let mut backoff = Backoff::default();
        loop {
            // Poll what is ready now; tasks woken meanwhile run on the next turn, after the
            // reactors (so a task that keeps waking itself cannot starve I/O completion).
            let ready = self.queue.lock().len();
            let mut progressed = ready > 0;
            for _ in 0..ready {
                let Some(id) = self.queue.lock().pop_front() else {
                    break;
                };
                if id == MAIN {
                    main.queued.store(false, Ordering::Release);
                    let mut cx = Context::from_waker(&main_waker);
                    if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
                        return Some(output);
                    }
                } else {
                    self.poll_task(id);
                }
            }
            if until_tasks_done && self.live == 0 {
                return None;
            }
            for reactor in &mut self.reactors {
                progressed |= reactor() > 0;
            }
            if progressed {
                backoff.reset();
            } else if self.reactors.is_empty() {
                self.park();
            } else {
                backoff.idle();
            }
        }
    }

    fn poll_task(&mut self, id: TaskId) {
        let Some(slot) = self.tasks.get_mut(id.index as usize) else {
            return;
        };
        if slot.generation != id.generation {
            return; // A stale wake of a finished task whose slot was reused.
        }
        let Some(task) = slot.task.as_mut() else {
            return;
        };
        task.state.queued.store(false, Ordering::Release);
        let mut cx = Context::from_waker(&task.waker);
        if task.future.as_mut().poll(&mut cx).is_ready() {
            slot.task = None;
            slot.generation = slot.generation.wrapping_add(1);
            self.free.push(id.index);
            self.live -= 1;
        }
    }

    /// Sleeps until a waker pushes something (only used when there is no reactor to poll).
    fn park(&self) {
        self.queue.parked.store(true, Ordering::SeqCst);
        while self.queue.lock().is_empty() {
            thread::park();
        }
        self.queue.parked.store(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::{Cell, RefCell};
    use std::rc::Rc;

    /// A future that is pending `n` times, waking itself (or not) each time.
    struct Countdown {
        left: u32,
        self_wake: bool,
        polls: Rc<Cell<u32>>,
    }

    impl Future for Countdown {
        type Output = u32;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u32> {
            self.polls.set(self.polls.get() + 1);
            if self.left == 0 {
                return Poll::Ready(self.polls.get());
            }
            self.left -= 1;
            if self.self_wake {
                cx.waker().wake_by_ref();
            }
            Poll::Pending
        }
    }

    #[test]
    fn block_on_polls_only_when_woken_and_runs_the_reactor_between() {
        let polls = Rc::new(Cell::new(0));
        let out = block_on(
            Countdown {
                left: 3,
                self_wake: true,
                polls: polls.clone(),
            },
            || 0,
        );
        assert_eq!(out, 4);

        // Not self-waking: the reactor wakes it (as poll_completions would).
        let waker_slot: Rc<RefCell<Option<Waker>>> = Rc::default();
        let reactor_calls = Rc::new(Cell::new(0));
        let fut = {
            let waker_slot = waker_slot.clone();
            let mut left = 2;
            std::future::poll_fn(move |cx| {
                if left == 0 {
                    return Poll::Ready("done");
                }
                left -= 1;
                *waker_slot.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            })
        };
        let out = block_on(fut, || {
            reactor_calls.set(reactor_calls.get() + 1);
            // Completes something on every 10th call only.
            if reactor_calls.get() % 10 == 0 {
                if let Some(w) = waker_slot.borrow_mut().take() {
                    w.wake();
                    return 1;
                }
            }
            0
        });
        assert_eq!(out, "done");
        assert_eq!(
            reactor_calls.get(),
            20,
            "two wakes, each after 10 reactor calls"
        );
    }

    #[test]
    fn local_executor_runs_spawned_tasks_to_completion() {
        let mut ex = LocalExecutor::new();
        let results = Rc::new(RefCell::new(Vec::new()));
        let mut ids = Vec::new();
        for i in 0..10u32 {
            let results = results.clone();
            ids.push(ex.spawn(async move {
                let polls = Countdown {
                    left: i,
                    self_wake: true,
                    polls: Rc::default(),
                }
                .await;
                results.borrow_mut().push((i, polls));
            }));
        }
        assert_eq!(ex.len(), 10);
        ex.run();
        assert!(ex.is_empty());
        assert!(ids.iter().all(|&id| !ex.is_running(id)));
        let mut got = results.borrow().clone();
        got.sort();
        assert_eq!(got, (0..10).map(|i| (i, i + 1)).collect::<Vec<_>>());
        // Slots are reused with a new generation: old ids stay finished.
        let id = ex.spawn(async {});
        assert!(ex.is_running(id));
        assert!(!ids.contains(&id));
        ex.run();
        assert!(!ex.is_running(id));
    }

    #[test]
    fn woken_from_another_thread_while_parked() {
        let mut ex = LocalExecutor::new();
        let (tx, rx) = std::sync::mpsc::channel::<Waker>();
        let flag = Arc::new(AtomicBool::new(false));
        let worker_flag = flag.clone();
        let worker = thread::spawn(move || {
            let waker = rx.recv().unwrap();
            thread::sleep(std::time::Duration::from_millis(20));
            worker_flag.store(true, Ordering::Release);
            waker.wake();
        });
        let mut sent = Some(tx);
        let out = ex.block_on(std::future::poll_fn(|cx| {
            if flag.load(Ordering::Acquire) {
                return Poll::Ready(7);
            }
            if let Some(tx) = sent.take() {
                tx.send(cx.waker().clone()).unwrap();
            }
            Poll::Pending
        }));
        assert_eq!(out, 7);
        worker.join().unwrap();
    }

    #[test]
    fn duplicate_wakes_queue_a_task_once() {
        let queue = Arc::new(ReadyQueue {
            ids: Mutex::new(VecDeque::new()),
            parked: AtomicBool::new(false),
            thread: thread::current(),
        });
        let w = Arc::new(TaskWaker {
            id: TaskId {
                index: 3,
                generation: 1,
            },
            queued: AtomicBool::new(false),
            queue: queue.clone(),
        });
        let waker = Waker::from(w.clone());
        waker.wake_by_ref();
        waker.wake_by_ref();
        assert_eq!(queue.lock().len(), 1);
        w.queued.store(false, Ordering::Release);
        waker.wake();
        assert_eq!(queue.lock().len(), 2);
    }
}
