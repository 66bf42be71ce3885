//! The node-problem-detector plugins of examples/node-problem-detector/plugins/, run
//! the way node-problem-detector runs them (a shell, the exit code, stdout), against a
//! stand-in metadata service on 127.0.0.1: notices and no notices, errors, garbage, a
//! refused IMDSv2 token, and a server that accepts the connection and never answers.
//! Then the monitor configurations, the chart values that carry them, and the
//! policies that read what they write.
//!
//! A test that needs `sh` or `curl` and does not find it on PATH says so in one line
//! on stderr and passes.

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{Arc, Mutex},
    thread,
    time::{Duration, Instant},
};

use serde_json::Value;

/// What each request to the metadata service may take, in the plugins under test.
const METADATA_TIMEOUT: &str = "2";
/// A plugin run that takes longer than this has not honoured its timeout. Loose on
/// purpose: the machine may be busy compiling.
const RUN_LIMIT: Duration = Duration::from_secs(20);

const TOKEN: &str = "AQAEAEx3-stand-in-token==";

fn folder() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/node-problem-detector")
}

fn plugins() -> PathBuf {
    folder().join("plugins")
}

// ------------------------------------------------------------------ tools on PATH

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()))
}

/// Whether every tool is there; if not, one line on stderr (not captured by the
/// test harness) says which test is skipped and why.
fn have(test: &str, tools: &[&str]) -> bool {
    let missing: Vec<&str> = tools.iter().copied().filter(|t| !on_path(t)).collect();
    if missing.is_empty() {
        return true;
    }
    let _ = writeln!(
        std::io::stderr(),
        "skipping npd_plugins::{test}: {} not on PATH",
        missing.join(" and ")
    );
    false
}

// ------------------------------------------------------------------ the stand-in

#[derive(Clone, Debug)]
struct Request {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
}

impl Request {
    fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or_default()
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

enum Reply {
    Answer(u16, String),
    /// Take the request and never answer, holding the connection open.
    Silence,
}

fn answer(status: u16, body: &str) -> Reply {
    Reply::Answer(status, body.to_string())
}

type Route = dyn Fn(&Request) -> Reply + Send + Sync;

struct StandIn {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Request>>>,
}

impl StandIn {
    fn start(route: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> StandIn {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local address");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let route: Arc<Route> = Arc::new(route);
        let log = Arc::clone(&seen);
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let route = Arc::clone(&route);
                let log = Arc::clone(&log);
                thread::spawn(move || serve(stream, &*route, &log));
            }
        });
        StandIn { addr, seen }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn requests(&self) -> Vec<Request> {
        self.seen.lock().unwrap().clone()
    }

    fn paths(&self) -> Vec<String> {
        self.requests()
            .iter()
            .map(|r| format!("{} {}", r.method, r.path()))
            .collect()
    }
}

fn serve(stream: TcpStream, route: &Route, seen: &Mutex<Vec<Request>>) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read_half);
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let target = parts.next().unwrap_or_default().to_string();
    let mut headers = Vec::new();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 {
            break;
        }
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            headers.push((name.trim().to_string(), value.trim().to_string()));
        }
    }
    // The plugins send no request bodies.
    let request = Request {
        method,
        target,
        headers,
    };
    seen.lock().unwrap().push(request.clone());
    match route(&request) {
        Reply::Answer(status, body) => {
            let reason = match status {
                200 => "OK",
                400 => "Bad Request",
                401 => "Unauthorized",
                403 => "Forbidden",
                404 => "Not Found",
                500 => "Internal Server Error",
                _ => "Whatever",
            };
            let mut stream = stream;
            let _ = write!(
                stream,
                "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.flush();
        }
        Reply::Silence => {
            thread::sleep(Duration::from_secs(120));
            drop(stream);
        }
    }
}

/// A port on 127.0.0.1 where nothing listens (it was free a moment ago).
fn closed_port_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local address");
    drop(listener);
    format!("http://{addr}")
}

// ------------------------------------------------------------------ running a plugin

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

/// Runs `sh plugins/SCRIPT ARGS` with only the given endpoint variables (the
/// caller's own are dropped, so are proxies) and a bound on the time it may take.
fn run(script: &str, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut command = Command::new("sh");
    command
        .arg(plugins().join(script))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("METADATA_TIMEOUT", METADATA_TIMEOUT)
        .env("NO_PROXY", "*")
        .env("no_proxy", "*");
    for var in [
        "AWS_IMDS_ENDPOINT",
        "GCE_METADATA_ENDPOINT",
        "AZURE_IMDS_ENDPOINT",
        "SYSFS_NET",
        "http_proxy",
        "HTTP_PROXY",
        "all_proxy",
        "ALL_PROXY",
        "CURL_HOME",
    ] {
        command.env_remove(var);
    }
    for (name, value) in env {
        command.env(name, value);
    }
    let start = Instant::now();
    let mut child = command.spawn().expect("start sh");
    loop {
        if child.try_wait().expect("wait for sh").is_some() {
            break;
        }
        if start.elapsed() > RUN_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{script} {args:?} still running after {RUN_LIMIT:?}: it ignores its timeout");
        }
        thread::sleep(Duration::from_millis(20));
    }
    let elapsed = start.elapsed();
    let output = child.wait_with_output().expect("collect output");
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).trim().to_string(),
        stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        elapsed,
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?} after {:?}\n  stdout: {}\n  stderr: {}",
            self.code, self.elapsed, self.stdout, self.stderr
        )
    }
}

/// node-problem-detector writes stdout into the condition message, cut at
/// max_output_length (80 in the monitors here): a useful message fits in one line.
fn assert_short(run: &Run) {
    assert!(
        !run.stdout.is_empty() && run.stdout.len() <= 80 && !run.stdout.contains('\n'),
        "message should be one line of at most 80 bytes: {run}"
    );
}

fn assert_exit(run: &Run, code: i32, message_part: &str) {
    assert_eq!(run.code, Some(code), "exit code: {run}");
    assert!(
        run.stdout.contains(message_part),
        "stdout should contain {message_part:?}: {run}"
    );
    assert_short(run);
}

/// Neither OK (0) nor a problem (1): node-problem-detector sets Unknown.
fn assert_could_not_tell(run: &Run, message_part: &str) {
    assert!(
        !matches!(run.code, Some(0) | Some(1)),
        "a failure to ask must not read as an answer: {run}"
    );
    assert!(
        run.stdout.contains(message_part),
        "stdout should contain {message_part:?}: {run}"
    );
    assert_short(run);
}

// ------------------------------------------------------------------ AWS

/// IMDSv2 as EC2 serves it: a token for a PUT with a TTL, every read needs the
/// token, `instance_action` answers spot/instance-action, and a rebalance
/// recommendation is always on offer.
fn imds(instance_action: impl Fn() -> Reply + Send + Sync + 'static) -> StandIn {
    StandIn::start(move |r| match (r.method.as_str(), r.path()) {
        ("PUT", "/latest/api/token") => {
            if r.header("X-aws-ec2-metadata-token-ttl-seconds").is_some() {
                answer(200, TOKEN)
            } else {
                answer(400, "missing ttl")
            }
        }
        (_, _) if r.header("X-aws-ec2-metadata-token") != Some(TOKEN) => answer(401, ""),
        ("GET", "/latest/meta-data/spot/instance-action") => instance_action(),
        ("GET", "/latest/meta-data/events/recommendations/rebalance") => {
            answer(200, r#"{"noticeTime": "2026-11-20T11:58:00Z"}"#)
        }
        _ => answer(404, "Not Found"),
    })
}

fn run_aws(server: &str) -> Run {
    run(
        "spot-interruption-aws.sh",
        &[],
        &[("AWS_IMDS_ENDPOINT", server)],
    )
}

#[test]
fn aws_interruption_notice_is_a_problem() {
    if !have("aws_interruption_notice_is_a_problem", &["sh", "curl"]) {
        return;
    }
    for action in ["terminate", "stop", "hibernate"] {
        let body = format!(r#"{{"action": "{action}", "time": "2026-11-20T12:02:00Z"}}"#);
        let server = imds(move || answer(200, &body));
        let run = run_aws(&server.url());
        assert_exit(&run, 1, action);
        assert!(run.stdout.contains("2026-11-20T12:02:00Z"), "{run}");
        assert_eq!(
            server.paths(),
            [
                "PUT /latest/api/token",
                "GET /latest/meta-data/spot/instance-action"
            ]
        );
    }
}

#[test]
fn aws_rebalance_recommendation_is_no_notice() {
    if !have("aws_rebalance_recommendation_is_no_notice", &["sh", "curl"]) {
        return;
    }
    let server = imds(|| answer(404, "Not Found"));
    let run = run_aws(&server.url());
    assert_exit(&run, 0, "no spot interruption notice");
    assert!(
        !server.paths().iter().any(|p| p.contains("rebalance")),
        "a rebalance recommendation must not be read: {:?}",
        server.paths()
    );
}

#[test]
fn aws_refused_token_cannot_tell() {
    if !have("aws_refused_token_cannot_tell", &["sh", "curl"]) {
        return;
    }
    for status in [401, 403] {
        let server = StandIn::start(move |r| match r.path() {
            "/latest/api/token" => answer(status, "denied"),
            _ => answer(
                200,
                r#"{"action": "terminate", "time": "2026-11-20T12:02:00Z"}"#,
            ),
        });
        let run = run_aws(&server.url());
        assert_could_not_tell(&run, &status.to_string());
        assert_eq!(
            server.paths(),
            ["PUT /latest/api/token"],
            "no read without a token"
        );
    }
}

#[test]
fn aws_bad_answers_cannot_tell() {
    if !have("aws_bad_answers_cannot_tell", &["sh", "curl"]) {
        return;
    }
    let server = imds(|| answer(500, "oops"));
    assert_could_not_tell(&run_aws(&server.url()), "HTTP 500");

    for garbage in [
        "<html><body>Service Unavailable</body></html>",
        r#"{"action": "reboot", "time": "2026-11-20T12:02:00Z"}"#,
        "",
    ] {
        let server = imds(move || answer(200, garbage));
        assert_could_not_tell(&run_aws(&server.url()), "unexpected answer");
    }

    let server = StandIn::start(|r| match r.path() {
        "/latest/api/token" => answer(200, "not a token\nat all"),
        _ => answer(404, ""),
    });
    assert_could_not_tell(&run_aws(&server.url()), "token");
}

#[test]
fn aws_silence_cannot_tell_within_the_timeout() {
    if !have(
        "aws_silence_cannot_tell_within_the_timeout",
        &["sh", "curl"],
    ) {
        return;
    }
    // silent at the token ...
    let server = StandIn::start(|_| Reply::Silence);
    let run = run_aws(&server.url());
    assert_could_not_tell(&run, "no answer");
    assert!(run.elapsed < RUN_LIMIT, "{run}");

    // ... and silent at the notice, once the token came
    let server = imds(|| Reply::Silence);
    let run = run_aws(&server.url());
    assert_could_not_tell(&run, "no answer");
    assert!(run.elapsed < RUN_LIMIT, "{run}");

    // nobody listening at all
    assert_could_not_tell(&run_aws(&closed_port_url()), "no answer");
}

// ------------------------------------------------------------------ GCE

fn metadata_server(preempted: impl Fn() -> Reply + Send + Sync + 'static) -> StandIn {
    StandIn::start(move |r| {
        if r.header("Metadata-Flavor") != Some("Google") {
            return answer(403, "Missing Metadata-Flavor:Google header.");
        }
        match r.path() {
            "/computeMetadata/v1/instance/preempted" => preempted(),
            _ => answer(404, ""),
        }
    })
}

fn run_gce(server: &str) -> Run {
    run(
        "spot-interruption-gce.sh",
        &[],
        &[("GCE_METADATA_ENDPOINT", server)],
    )
}

#[test]
fn gce_preempted_is_a_problem() {
    if !have("gce_preempted_is_a_problem", &["sh", "curl"]) {
        return;
    }
    let server = metadata_server(|| answer(200, "TRUE"));
    assert_exit(&run_gce(&server.url()), 1, "preempting");

    let server = metadata_server(|| answer(200, "FALSE"));
    assert_exit(&run_gce(&server.url()), 0, "no preemption notice");
}

#[test]
fn gce_bad_answers_and_silence_cannot_tell() {
    if !have("gce_bad_answers_and_silence_cannot_tell", &["sh", "curl"]) {
        return;
    }
    let server = metadata_server(|| answer(500, ""));
    assert_could_not_tell(&run_gce(&server.url()), "HTTP 500");

    let server = metadata_server(|| answer(200, "maybe"));
    assert_could_not_tell(&run_gce(&server.url()), "unexpected answer");

    let server = metadata_server(|| Reply::Silence);
    let run = run_gce(&server.url());
    assert_could_not_tell(&run, "no answer");
    assert!(run.elapsed < RUN_LIMIT, "{run}");

    assert_could_not_tell(&run_gce(&closed_port_url()), "no answer");
}

// ------------------------------------------------------------------ Azure

const VM: &str = "spot-pool_7";

/// Azure IMDS: this VM's name, and `events` as Scheduled Events.
fn azure(events: impl Fn() -> Reply + Send + Sync + 'static) -> StandIn {
    StandIn::start(move |r| {
        if r.header("Metadata") != Some("true") {
            return answer(
                400,
                r#"{"error": "Bad request. Required metadata header not specified"}"#,
            );
        }
        match r.path() {
            "/metadata/instance/compute/name" if r.target.contains("format=text") => {
                answer(200, VM)
            }
            "/metadata/scheduledevents" if r.target.contains("api-version=") => events(),
            _ => answer(404, ""),
        }
    })
}

fn event(kind: &str, resources: &[&str]) -> Value {
    serde_json::json!({
        "EventId": format!("{kind}-{}", resources.join("-")),
        "EventStatus": "Scheduled",
        "EventType": kind,
        "ResourceType": "VirtualMachine",
        "Resources": resources,
        "NotBefore": "Fri, 20 Nov 2026 12:00:30 GMT",
        "Description": "",
        "EventSource": "Platform",
        "DurationInSeconds": -1,
    })
}

fn events_document(events: Vec<Value>) -> String {
    // pretty-printed, as the service formats it: the plugin must not rely on one line
    serde_json::to_string_pretty(&serde_json::json!({
        "DocumentIncarnation": 4,
        "Events": events,
    }))
    .unwrap()
}

fn run_azure(server: &str) -> Run {
    run(
        "spot-interruption-azure.sh",
        &[],
        &[("AZURE_IMDS_ENDPOINT", server)],
    )
}

#[test]
fn azure_preempt_of_this_vm_is_a_problem() {
    if !have("azure_preempt_of_this_vm_is_a_problem", &["sh", "curl"]) {
        return;
    }
    let body = events_document(vec![
        event("Freeze", &["spot-pool_3"]),
        event("Preempt", &["spot-pool_8", VM]),
    ]);
    let server = azure(move || answer(200, &body));
    let run = run_azure(&server.url());
    assert_exit(&run, 1, "Preempt");
    assert!(run.stdout.contains("12:00:30"), "{run}");
}

#[test]
fn azure_other_events_are_no_notice() {
    if !have("azure_other_events_are_no_notice", &["sh", "curl"]) {
        return;
    }
    // a Preempt of another member of the placement group (one whose name starts
    // with this VM's), and every other kind of event for this VM
    let body = events_document(vec![
        event("Preempt", &["spot-pool_70", "spot-pool_8"]),
        event("Reboot", &[VM]),
        event("Redeploy", &[VM]),
        event("Freeze", &[VM]),
        event("Terminate", &[VM]),
    ]);
    let server = azure(move || answer(200, &body));
    assert_exit(&run_azure(&server.url()), 0, "no Preempt event");

    let server = azure(|| answer(200, r#"{"DocumentIncarnation":0,"Events":[]}"#));
    assert_exit(&run_azure(&server.url()), 0, "no Preempt event");
}

#[test]
fn azure_bad_answers_and_silence_cannot_tell() {
    if !have("azure_bad_answers_and_silence_cannot_tell", &["sh", "curl"]) {
        return;
    }
    let server = azure(|| answer(500, "Internal Server Error"));
    assert_could_not_tell(&run_azure(&server.url()), "HTTP 500");

    let server = azure(|| answer(200, "Service warming up"));
    assert_could_not_tell(&run_azure(&server.url()), "unexpected answer");

    // without its own name the plugin cannot tell whose event it is
    let body = events_document(vec![event("Preempt", &[VM])]);
    let server = StandIn::start(move |r| match r.path() {
        "/metadata/scheduledevents" => answer(200, &body),
        _ => answer(404, ""),
    });
    assert_could_not_tell(&run_azure(&server.url()), "compute/name");

    // the first request after boot may take minutes: Unknown until then
    let server = azure(|| Reply::Silence);
    let run = run_azure(&server.url());
    assert_could_not_tell(&run, "no answer");
    assert!(run.elapsed < RUN_LIMIT, "{run}");

    assert_could_not_tell(&run_azure(&closed_port_url()), "no answer");
}

// ------------------------------------------------------------------ NIC

/// A made-up /sys/class/net, removed when dropped.
struct Sysfs(PathBuf);

impl Sysfs {
    /// `(name, has a device, operstate, carrier)` per interface.
    fn new(test: &str, interfaces: &[(&str, bool, &str, Option<&str>)]) -> Sysfs {
        let root = std::env::temp_dir().join(format!("npd-plugins-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for (name, device, operstate, carrier) in interfaces {
            let dir = root.join(name);
            std::fs::create_dir_all(&dir).unwrap();
            if *device {
                std::fs::create_dir(dir.join("device")).unwrap();
            }
            std::fs::write(dir.join("operstate"), format!("{operstate}\n")).unwrap();
            if let Some(carrier) = carrier {
                std::fs::write(dir.join("carrier"), format!("{carrier}\n")).unwrap();
            }
        }
        std::fs::create_dir_all(&root).unwrap();
        Sysfs(root)
    }

    fn run(&self, args: &[&str]) -> Run {
        run(
            "check-nic.sh",
            args,
            &[("SYSFS_NET", self.0.to_str().unwrap())],
        )
    }
}

impl Drop for Sysfs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const VIRTUAL: [(&str, bool, &str, Option<&str>); 3] = [
    ("lo", false, "unknown", Some("1")),
    ("cni0", false, "up", Some("1")),
    ("veth1a2b", false, "down", None),
];

#[test]
fn nic_all_up_is_ok() {
    if !have("nic_all_up_is_ok", &["sh"]) {
        return;
    }
    let mut interfaces = VIRTUAL.to_vec();
    interfaces.push(("ens5", true, "up", Some("1")));
    // a driver that reports no operstate, but a carrier
    interfaces.push(("ens6", true, "unknown", Some("1")));
    let sysfs = Sysfs::new("all-up", &interfaces);
    let run = sysfs.run(&[]);
    assert_exit(&run, 0, "ens5 ens6");
    assert!(
        !run.stdout.contains("veth"),
        "virtual interfaces are not checked: {run}"
    );
}

#[test]
fn nic_down_or_gone_is_a_problem() {
    if !have("nic_down_or_gone_is_a_problem", &["sh"]) {
        return;
    }
    let mut interfaces = VIRTUAL.to_vec();
    interfaces.push(("ens5", true, "up", Some("1")));
    interfaces.push(("ens6", true, "down", None));
    interfaces.push(("ens7", true, "unknown", Some("0")));
    let sysfs = Sysfs::new("down", &interfaces);
    let run = sysfs.run(&[]);
    assert_exit(&run, 1, "ens6(down)");
    assert!(run.stdout.contains("ens7(unknown)"), "{run}");
    assert!(!run.stdout.contains("ens5"), "{run}");

    // named interfaces: only those, and one that has disappeared is down
    assert_exit(&sysfs.run(&["ens5"]), 0, "ens5");
    assert_exit(&sysfs.run(&["ens5", "eth9"]), 1, "eth9(gone)");
}

#[test]
fn nic_nothing_to_check_cannot_tell() {
    if !have("nic_nothing_to_check_cannot_tell", &["sh"]) {
        return;
    }
    // what a pod's own network namespace shows: no interface with a device
    let sysfs = Sysfs::new("virtual-only", &VIRTUAL);
    assert_could_not_tell(&sysfs.run(&[]), "no network interface");
}

// ------------------------------------------------------------------ configurations

fn json_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

/// Go durations as the monitor configurations use them (`5s`, `2m`).
fn seconds(duration: &str) -> u64 {
    let (number, unit) = duration.split_at(duration.len() - 1);
    let number: u64 = number
        .parse()
        .unwrap_or_else(|_| panic!("duration {duration:?}"));
    match unit {
        "s" => number,
        "m" => number * 60,
        _ => panic!("duration {duration:?}: use s or m"),
    }
}

/// (condition type, reason when True) of every permanent rule of plugins/.
fn plugin_conditions() -> BTreeMap<String, String> {
    let mut conditions = BTreeMap::new();
    for path in json_files(&plugins()) {
        let config: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for rule in config["rules"].as_array().unwrap() {
            conditions.insert(
                rule["condition"].as_str().unwrap().to_string(),
                rule["reason"].as_str().unwrap().to_string(),
            );
        }
    }
    conditions
}

#[test]
fn monitors_run_the_plugins_of_this_folder() {
    let files = json_files(&plugins());
    assert!(files.len() >= 4, "{files:?}");
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let config: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(config["plugin"], "custom", "{name}");
        let plugin_config = &config["pluginConfig"];
        let interval = seconds(plugin_config["invoke_interval"].as_str().unwrap());
        let timeout = seconds(plugin_config["timeout"].as_str().unwrap());
        assert_eq!(plugin_config["max_output_length"], 80, "{name}");
        assert!(
            config["source"].as_str().is_some_and(|s| !s.is_empty()),
            "{name}"
        );

        let rules = config["rules"].as_array().unwrap();
        let defaults = config["conditions"].as_array().unwrap();
        // node-problem-detector applies every permanent rule's result to its
        // condition: two rules for one condition would overwrite each other each turn
        assert_eq!(rules.len(), 1, "{name}: one permanent rule per condition");
        assert_eq!(defaults.len(), 1, "{name}");
        let rule = &rules[0];
        let default = &defaults[0];
        assert_eq!(rule["type"], "permanent", "{name}");
        assert_eq!(rule["condition"], default["type"], "{name}");
        assert_ne!(
            rule["reason"], default["reason"],
            "{name}: the reason is what tells a problem from the default"
        );
        let rule_timeout = seconds(rule["timeout"].as_str().unwrap());
        assert!(rule_timeout <= timeout && rule_timeout > 0, "{name}");
        assert!(interval >= 5, "{name}");

        let script = rule["path"]
            .as_str()
            .unwrap()
            .strip_prefix("/custom-config/")
            .unwrap_or_else(|| panic!("{name}: the chart mounts the scripts at /custom-config/"));
        let script_path = plugins().join(script);
        let text = std::fs::read_to_string(&script_path)
            .unwrap_or_else(|e| panic!("{name}: {}: {e}", script_path.display()));
        assert!(
            text.starts_with("#!/bin/sh\n"),
            "{script}: a POSIX sh script"
        );
        // two metadata requests at most, each bounded by METADATA_TIMEOUT (default 2 s),
        // and the shell around them
        if text.contains("curl") {
            assert!(
                rule_timeout > 2 * 2,
                "{name}: the rule timeout must cover the requests"
            );
        }
    }
    let conditions = plugin_conditions();
    assert_eq!(
        conditions.get("SpotInterruption").map(String::as_str),
        Some("PreemptionNotice")
    );
    assert_eq!(
        conditions.get("NetworkInterfaceCard").map(String::as_str),
        Some("NICDown")
    );
}

#[test]
fn chart_values_carry_the_plugins() {
    let values: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(folder().join("npd-values.yaml")).unwrap())
            .unwrap();
    let settings = &values["settings"];
    let definitions = settings["custom_monitor_definitions"].as_object().unwrap();
    let mut in_folder: Vec<String> = std::fs::read_dir(plugins())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    in_folder.sort();
    let mut carried: Vec<String> = definitions.keys().cloned().collect();
    carried.sort();
    assert_eq!(
        carried, in_folder,
        "npd-values.yaml carries every file of plugins/"
    );
    for (name, text) in definitions {
        let file = std::fs::read_to_string(plugins().join(name)).unwrap();
        assert_eq!(
            text.as_str().unwrap(),
            file,
            "npd-values.yaml's copy of {name} differs from plugins/{name}"
        );
    }
    for monitor in settings["custom_plugin_monitors"].as_array().unwrap() {
        let monitor = monitor.as_str().unwrap();
        if let Some(name) = monitor.strip_prefix("/custom-config/") {
            assert!(
                definitions.contains_key(name),
                "{monitor} is not in the ConfigMap"
            );
        }
    }
    assert_eq!(values["hostNetwork"], true);
    let tolerates_no_execute =
        values["tolerations"].as_array().unwrap().iter().any(|t| {
            t["operator"] == "Exists" && t["effect"] == "NoExecute" && t.get("key").is_none()
        });
    assert!(
        tolerates_no_execute,
        "node-problem-detector must outlast the NoExecute taints"
    );
}

/// What node-problem-detector's own configurations set when a problem is found:
/// condition type and the reasons of its permanent rules for it.
const NPD_CONDITIONS: [(&str, &[&str]); 10] = [
    ("KernelDeadlock", &["DockerHung"]),
    ("ReadonlyFilesystem", &["FilesystemIsReadOnly"]),
    ("XfsShutdown", &["XfsHasShutdown"]),
    ("CperHardwareErrorFatal", &["CperHardwareErrorFatal"]),
    ("DiskBadBlock", &["DiskBadBlock"]),
    ("FrequentKubeletRestart", &["FrequentKubeletRestart"]),
    ("FrequentContainerdRestart", &["FrequentContainerdRestart"]),
    (
        "ContainerRuntimeUnhealthy",
        &["ContainerdUnhealthy", "DockerUnhealthy"],
    ),
    ("KubeletUnhealthy", &["KubeletUnhealthy"]),
    ("CorruptDockerOverlay2", &["CorruptDockerOverlay2"]),
];

#[test]
fn policies_read_what_node_problem_detector_writes() {
    let mut known: BTreeMap<String, Vec<String>> = NPD_CONDITIONS
        .iter()
        .map(|(t, reasons)| {
            (
                t.to_string(),
                reasons.iter().map(|r| r.to_string()).collect(),
            )
        })
        .collect();
    for (condition, reason) in plugin_conditions() {
        known.insert(condition, vec![reason]);
    }
    let mut read = Vec::new();
    let dir = folder().join("policies");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    for path in paths {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        assert!(
            name.ends_with(".yaml"),
            "policies/ holds only policies: {name}"
        );
        let policy: Value =
            serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(policy["kind"], "TaintPolicy", "{name}");
        assert_eq!(
            format!("{}.yaml", policy["metadata"]["name"].as_str().unwrap()),
            name,
            "a policy's file is named after it"
        );
        for matcher in policy["spec"]["matchers"].as_array().unwrap() {
            for condition in matcher["conditions"].as_array().unwrap() {
                let kind = condition["type"].as_str().unwrap();
                let reasons = known
                    .get(kind)
                    .unwrap_or_else(|| panic!("{name}: nothing here reports {kind}"));
                // node-problem-detector writes True, False or Unknown, nothing else
                assert_eq!(condition["status"], "True", "{name}");
                if let Some(reason) = condition["reason"].as_str() {
                    assert!(
                        reasons.iter().any(|r| r == reason),
                        "{name}: {kind} is True with reason {reasons:?}, not {reason}"
                    );
                }
                read.push(kind.to_string());
            }
        }
    }
    for (kind, _) in NPD_CONDITIONS {
        assert!(read.iter().any(|r| r == kind), "no policy reads {kind}");
    }
    // the spot example reads the reason the spot plugins write
    let spot = std::fs::read_to_string(folder().join("../spot-out-of-service.yaml")).unwrap();
    assert!(spot.contains("type: SpotInterruption") && spot.contains("PreemptionNotice"));
}
