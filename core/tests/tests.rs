//! tessera-core's integration tests, one binary: the simulator (`sim`) and the YAML input limits
//! (`yaml_limits`). The allocation-bounded property tests (`*_props.rs`) are binaries of their own:
//! each owns the global allocator.

mod sim;
mod yaml_limits;
