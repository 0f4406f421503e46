//! What a SASL passthrough client's own exchange means for its connection, beyond forwarding
//! it: which topics its batches may move to ([`Permit`]), and, once the broker accepted it as a
//! principal kroute can name, this connection's entry among that principal's connections
//! ([`crate::upstream::principals`]), over which its and its sibling connections' moved
//! batches go out.
//!
//! The entry is made on the connection's reader, from the broker's answer to the exchange's
//! last SaslAuthenticate: as soon as the broker accepted the client, whether or not the client
//! sends anything more on this connection. From the client's SaslHandshake until that answer
//! (or, for exchanges kroute does not follow, until the client's next other request), kroute
//! injects nothing on the connection ([`crate::upstream::Upstream::client_sasl_started`]).

use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::protocol::header::RequestHead;
use crate::security::Permit;
use crate::security::passthrough::{ClientSasl, ObserveError, Observed};
use crate::security::principal::{Principal, accepted};
use crate::upstream::principals::{ClientConnections, Registration};
use crate::upstream::{AnswerHook, SaslGate, Upstream};

/// The SASL side of one client connection.
#[derive(Default)]
pub(super) struct ClientAuth {
    sasl: ClientSasl,
    /// Set from the client's SaslHandshake until its exchange ends.
    gate: Option<SaslGate>,
    /// This connection's entry among its principal's connections, once the broker accepted it.
    registration: Arc<Mutex<Option<Registration>>>,
    /// For the answer to the SaslAuthenticate request just observed, if it is the last round.
    answer_hook: Option<AnswerHook>,
}

impl ClientAuth {
    /// Which topics this client's batches may move to, and over whose connections.
    pub fn permit(&mut self) -> &Permit {
        // Only a client that authenticated, under a principal not confirmed yet, can gain one:
        // no lock on the requests of every other client.
        if matches!(self.sasl.permit(), Permit::Nothing | Permit::Written(_)) {
            let confirmed = self.lock().as_ref().map(|r| r.principal().clone());
            if let Some(principal) = confirmed {
                self.sasl.confirmed(principal);
            }
        }
        self.sasl.permit()
    }

    /// Whether the frame just read is a raw SASL token (after SaslHandshake v0).
    pub fn take_raw_token(&mut self) -> bool {
        self.sasl.take_raw_token()
    }

    /// A SaslHandshake or SaslAuthenticate request of the client, about to go to `home`.
    pub fn observe(
        &mut self,
        home: &Upstream,
        connections: &ClientConnections,
        (head, frame): (&RequestHead, &[u8]),
        kroute_has_credentials: bool,
    ) -> Result<(), ObserveError> {
        let Observed {
            first,
            handshake,
            last_round,
        } = self.sasl.observe(head, frame, kroute_has_credentials)?;
        if first {
            home.client_authenticated();
        }
        if handshake {
            self.gate = Some(home.client_sasl_started());
        }
        if let Some(claimed) = last_round {
            let version = head.api_version;
            let confirm = Confirm {
                registrar: connections.registrar(home),
                registration: self.registration.clone(),
                gate: self.gate.take(),
                claimed: Arc::new(claimed),
            };
            self.answer_hook = Some(Box::new(move |reply| {
                if let Ok(answer) = &reply {
                    confirm.answered(answer, version);
                }
                reply
            }));
        }
        Ok(())
    }

    /// The hook for the answer to the SaslAuthenticate request just observed, if any.
    pub fn take_answer_hook(&mut self) -> Option<AnswerHook> {
        self.answer_hook.take()
    }

    /// Any other request of the client: a SASL exchange kroute did not follow to its end is
    /// over (a client sends nothing else in the middle of one).
    pub fn other_request(&mut self) {
        if let Some(gate) = self.gate.take() {
            gate.open();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Registration>> {
        self.registration.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What the answer to an exchange's last round settles.
struct Confirm {
    registrar: crate::upstream::principals::Registrar,
    registration: Arc<Mutex<Option<Registration>>>,
    gate: Option<SaslGate>,
    claimed: Arc<Principal>,
}

impl Confirm {
    fn answered(&self, answer: &Bytes, version: i16) {
        // Not accepted: the exchange may go on (an OAUTHBEARER error challenge is answered by
        // the client before the broker fails it) and the broker then disconnects the client, so
        // the connection stays closed to injected requests.
        let Some(lifetime_ms) = accepted(answer, version, self.claimed.mechanism()) else {
            return;
        };
        if let Some(gate) = &self.gate {
            gate.accepted(lifetime_ms);
            gate.open();
        }
        let mut registration = self.registration.lock().unwrap_or_else(|e| e.into_inner());
        let same = registration
            .as_ref()
            .is_some_and(|r| r.principal() == &self.claimed);
        if !same {
            // The old entry goes first: both would carry this connection's id.
            registration.take();
            *registration = Some(self.registrar.register(self.claimed.clone()));
        }
    }
}
