//! A poll group: one thread that owns its connections (and their backend queue pairs) and
//! makes progress on each in turn: receive, execute, poll the backend, send. Nothing in a
//! pass is shared with another group except the association flags it reads.

use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::Instant;

use crate::backend::Backend;
use crate::conn::Conn;
use crate::server::Shared;

/// The group's loop, until the target stops.
pub(crate) fn run<B: Backend>(s: Arc<Shared<B>>, new: Receiver<TcpStream>) {
    let mut conns: Vec<Conn<B>> = Vec::new();
    let mut idle = 0u32;
    let mut listener_gone = false;
    while !s.stop.load(Ordering::Acquire) {
        if !listener_gone {
            loop {
                match new.try_recv() {
                    Ok(stream) => conns.push(Conn::new(stream, s.clone())),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        listener_gone = true;
                        break;
                    }
                }
            }
        }
        let now = Instant::now();
        let mut progress = false;
        conns.retain_mut(|c| {
            let (alive, moved) = c.poll(now);
            progress |= moved;
            alive
        });
        if progress {
            idle = 0;
        } else {
            idle = idle.saturating_add(1);
            if idle > s.config.idle_spins {
                std::thread::sleep(s.config.idle_sleep);
            }
        }
    }
    for mut c in conns {
        c.close("the target stops");
    }
}
