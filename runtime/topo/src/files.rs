//! Reading the text files the crate takes from outside (trace files for `topo-draw`, adjacency
//! matrices): at most [`MAX_FILE_BYTES`] of them, so that a path such as `/dev/zero` or a
//! runaway file is refused in one line instead of filling memory.

use crate::error::TopoError;
use std::path::Path;

/// The most bytes [`read_text`] reads (128 MiB, as `topgen` reads topology files): more than a
/// trace `topo-draw` can draw or a matrix of text needs (a matrix of 8,000 processes is 128
/// MiB of `0 `), far less than what would exhaust memory.
pub const MAX_FILE_BYTES: u64 = 128 << 20;

/// Read a text file of at most [`MAX_FILE_BYTES`].
///
/// # Errors
/// [`TopoError::Io`] naming the file: it cannot be read, is larger, or is not UTF-8.
pub fn read_text(path: &Path) -> Result<String, TopoError> {
    read_at_most(path, MAX_FILE_BYTES)
}

pub(crate) fn read_at_most(path: &Path, limit: u64) -> Result<String, TopoError> {
    converse::input::read_text_at_most(path, limit).map_err(|e| TopoError::Io {
        file: path.display().to_string(),
        reason: e.to_string(),
    })
}

pub(crate) use converse::input::quote;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endless_file_is_refused_not_read_into_memory() {
        let e = read_at_most(Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert_eq!(e.to_string(), "/dev/zero: it is larger than 1024 KiB");
        let e = read_text(Path::new("/nonexistent.trace")).unwrap_err();
        assert!(matches!(e, TopoError::Io { .. }), "{e}");
        let dir = std::env::temp_dir().join(format!("topo-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let exact = dir.join("exact");
        std::fs::write(&exact, [b'x'; 1024]).unwrap();
        assert_eq!(read_at_most(&exact, 1024).map(|s| s.len()), Ok(1024));
        assert!(read_at_most(&exact, 1023).is_err());
        std::fs::remove_dir_all(&dir).ok();
    }
}
