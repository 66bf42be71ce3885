//! Logs with `tracing`, as JSON lines (for log pipelines) or text (for people).

use tracing_subscriber::{EnvFilter, fmt};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Json,
    Text,
}

/// `level` is a tracing filter: `info`, `debug`, or `info,taint_operator=debug`.
pub fn init(format: LogFormat, level: &str) -> Result<(), String> {
    let filter = EnvFilter::try_new(level).map_err(|e| format!("--log-level {level:?}: {e}"))?;
    let builder = fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
    result.map_err(|e| format!("cannot set up logging: {e}"))
}

/// An error and its causes on one line ("client error (Connect)" alone does not say
/// that the connection was refused).
pub fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let m = s.to_string();
        if !message.contains(&m) {
            message.push_str(": ");
            message.push_str(&m);
        }
        source = s.source();
    }
    one_line(&message)
}

/// The first line of a message (YAML errors append a multi-line snippet of the
/// input), with the parentheses it leaves open closed.
pub fn one_line(message: &str) -> String {
    let mut lines = message.lines().filter(|l| !l.trim().is_empty());
    let first = lines.next().unwrap_or("").trim_end();
    if lines.next().is_none() {
        return first.to_string();
    }
    let open = first
        .matches('(')
        .count()
        .saturating_sub(first.matches(')').count());
    format!("{first}{}", ")".repeat(open))
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn one_line_keeps_the_first_line_and_closes_what_it_opened() {
        assert_eq!(one_line("plain"), "plain");
        assert_eq!(
            one_line(
                "kubeconfig: (failed to parse: line 1 column 1: expected mapping\n --> <input>:1:1\n  |\n1 | garbage\n"
            ),
            "kubeconfig: (failed to parse: line 1 column 1: expected mapping)"
        );
        assert_eq!(one_line("\nsecond\nthird"), "second");
    }
}
