//! The one retry rule of every delivery (`--delivery.retries N`): an attempt that failed in a way
//! the next one can mend (no connection, a timeout before anything was sent, HTTP 429 or 5xx,
//! an SMTP 4xx answer) is tried again after a pause that doubles (1 s, 2 s, 4 s …, at most 30 s);
//! a refusal (HTTP 4xx, SMTP 5xx, a TLS or authentication failure) is not. What it does not do:
//! decide which failures are which (the senders say so), or sleep when no retry is left.

use std::time::Duration;

/// How many times a failed delivery is tried again, and the first pause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    pub retries: u32,
    pub first_pause: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            retries: 2,
            first_pause: Duration::from_secs(1),
        }
    }
}

/// Longest pause between two attempts.
const MAX_PAUSE: Duration = Duration::from_secs(30);

/// How one attempt failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Another attempt may succeed.
    Transient(String),
    /// Another attempt would fail the same way.
    Permanent(String),
}

/// The last failure and how many attempts were made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    pub reason: String,
    pub attempts: u32,
}

/// Runs `attempt` until it succeeds, fails permanently or `retry.retries` retries are spent;
/// the attempts made on success.
pub fn run<T>(
    retry: Retry,
    mut attempt: impl FnMut() -> Result<T, Failure>,
) -> Result<(T, u32), Failed> {
    let mut pause = retry.first_pause;
    let mut made = 0;
    loop {
        made += 1;
        match attempt() {
            Ok(v) => return Ok((v, made)),
            Err(Failure::Permanent(reason)) => {
                return Err(Failed {
                    reason,
                    attempts: made,
                });
            }
            Err(Failure::Transient(reason)) if made > retry.retries => {
                return Err(Failed {
                    reason,
                    attempts: made,
                });
            }
            Err(Failure::Transient(_)) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(MAX_PAUSE);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Retry = Retry {
        retries: 2,
        first_pause: Duration::ZERO,
    };

    #[test]
    fn transient_failures_are_retried_up_to_the_limit_and_permanent_ones_never() {
        let mut n = 0;
        let r = run(NOW, || {
            n += 1;
            if n < 3 {
                Err(Failure::Transient(format!("try {n}")))
            } else {
                Ok(n)
            }
        });
        assert_eq!(r, Ok((3, 3)));
        let r: Result<((), u32), _> = run(NOW, || Err(Failure::Transient("down".into())));
        assert_eq!(
            r,
            Err(Failed {
                reason: "down".into(),
                attempts: 3
            })
        );
        let mut n = 0;
        let r: Result<((), u32), _> = run(NOW, || {
            n += 1;
            Err(Failure::Permanent("HTTP 403".into()))
        });
        assert_eq!(
            (r.unwrap_err().attempts, n),
            (1, 1),
            "a refusal is not retried"
        );
    }
}
