//! The build variant this program was built as (see conv-mach/): baked in by build.rs.

include!(concat!(env!("OUT_DIR"), "/variant.rs"));
