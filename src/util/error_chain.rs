//! An error and its causes on one line, each cause once.

use std::error::Error;

/// `error` and its chain of causes joined by `: `, leaving out each cause the text so far
/// already ends with: most of the crate's errors end their own message with their cause
/// as well as giving it as `source()`, and so do some of kube's, so printing every link
/// repeats it.
pub fn chain_text(error: &dyn Error) -> String {
    let mut text = String::new();
    for cause in std::iter::successors(Some(error), |e| (*e).source()) {
        let cause = cause.to_string();
        if text.is_empty() {
            text = cause;
        } else if !cause.is_empty() && !text.ends_with(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot read plugin x.wasm: {0}")]
    struct Read(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("loading failed")]
    struct Quiet(#[source] std::io::Error);

    #[test]
    fn a_cause_in_the_message_already_is_not_repeated_and_new_ones_are_added() {
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "there is no such file");
        let read = Read(io());
        assert_eq!(
            chain_text(&read),
            "cannot read plugin x.wasm: there is no such file"
        );
        let quiet = Quiet(io());
        assert_eq!(chain_text(&quiet), "loading failed: there is no such file");
    }
}
