//! Drawing traces (next step).
