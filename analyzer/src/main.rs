//! `tessera`: the process around the command line: the allocator and its options, SIGPIPE, the
//! exit code. The commands are [`cli`]; the logic is the `tessera` library.

use std::process::ExitCode;

mod cli;

/// mimalloc instead of glibc's allocator: the advisor allocates and frees large column buffers
/// per node; with glibc that churn cost a quarter of the run in page faults and `munmap`
/// (docs/performance.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (index 15 in both its v2 and v3 option enums).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
/// mimalloc's `mi_option_arena_eager_commit` (index 4 in both its v2 and v3 option enums).
const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;

fn main() -> ExitCode {
    // Keep freed memory instead of returning it to the OS after 10 ms: the advisor frees and
    // re-allocates the same amount per node, and re-faulting fresh pages (the kernel zeroing
    // them) cost ~20% of its CPU time (docs/performance.md). Peak RSS is unchanged.
    // SAFETY: sets a process-wide allocator option before any thread is started.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    // Commit arena memory when it is reserved rather than page by page as it is first used: the
    // report's per-node buffers (tens of MiB each) otherwise fault in fresh pages one at a time;
    // with this, the system time of `tessera report` at 256 GPUs fell from 1.9 s to 0.4 s and
    // its wall time by ~8%, peak RSS unchanged (docs/performance.md).
    // SAFETY: as above.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_ARENA_EAGER_COMMIT, 1) };
    // Output piped into a reader that stops early (`tessera … | head -1`) ends the process the
    // way every Unix filter ends, by SIGPIPE, instead of Rust's default of ignoring the signal
    // and panicking in `println!` with "failed printing to stdout" (exit 101).
    // SAFETY: called once at start-up, before any thread is spawned.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let result = cli::run(cli::parse());
    cli::source::remove_spills();
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("tessera: {e:#}");
            ExitCode::from(2)
        }
    }
}
