//! tessera-core's integration tests, one binary: the simulator (`sim`, `sim_layouts`) and the YAML input limits
//! (`yaml_limits`). The allocation-bounded property tests (`*_props.rs`) are binaries of their own:
//! each owns the global allocator.

mod sim;
mod sim_layouts;
mod yaml_limits;
