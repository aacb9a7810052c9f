//! Records the commit the binary is built from (`TESSERA_COMMIT`, shown by `--version`), by the
//! rule both binaries share (`build-support/commit.rs`).

include!("../build-support/commit.rs");

fn main() {
    record_commit();
}
