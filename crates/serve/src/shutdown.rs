//! The signals that stop the server: SIGTERM (what service managers send) and SIGINT (Ctrl-C).
//! Either one starts a graceful stop: no new connections, in-flight requests finished, queued
//! puts committed and answered, the writers' locks released, exit status 0.

use tokio::signal::unix::{signal, SignalKind};

/// Waits for SIGTERM or SIGINT; returns the signal's name. Handlers are installed when this is
/// first polled: call it (and poll it) before announcing that the server is up.
pub async fn signalled() -> std::io::Result<&'static str> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    })
}
