//! An error and its causes on one line, each cause once.

use std::error::Error;

/// `error` and its chain of causes joined by `: `, leaving out each cause whose text is
/// already there: most of the crate's errors put their cause in their own message as
/// well as in `source()`, and so do some of kube's, so printing every link repeats it.
pub fn chain_text<'a>(chain: impl IntoIterator<Item = &'a (dyn Error + 'static)>) -> String {
    let mut text = String::new();
    for cause in chain {
        let cause = cause.to_string();
        if text.is_empty() {
            text = cause;
        } else if !cause.is_empty() && !text.contains(&cause) {
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

    fn chain<'a>(e: &'a (dyn Error + 'static)) -> Vec<&'a (dyn Error + 'static)> {
        std::iter::successors(Some(e), |e| (*e).source()).collect()
    }

    #[test]
    fn a_cause_in_the_message_already_is_not_repeated_and_new_ones_are_added() {
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "there is no such file");
        let read = Read(io());
        assert_eq!(
            chain_text(chain(&read)),
            "cannot read plugin x.wasm: there is no such file"
        );
        let quiet = Quiet(io());
        assert_eq!(
            chain_text(chain(&quiet)),
            "loading failed: there is no such file"
        );
    }
}
