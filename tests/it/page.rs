//! The status page at `/` in a real browser (headless Chromium through chromedriver): it
//! loads without a token where reads are free, shows the config's handlers, its numbers
//! move under churn, its pause button pauses a handler with the token, nothing reaches the
//! console, every button stays inside its card and no plot label overlaps another; where
//! reads need the token it asks for one.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use switchyard::sim::ChurnConfig;

use crate::support::browser::Browser;
use crate::support::hostile::{Hostile, Reply};
use crate::support::{self, TestDaemon};

const TWO_HANDLERS: &str = "
handlers:
  log-events: {}
  audit:
    plugin: log-events
routes:
  - name: main
    resource: configmaps
    handler: log-events
  - name: audit
    resource: configmaps
    handler: audit
";

const WAIT: Duration = Duration::from_secs(30);

/// The handler names in the page's table.
async fn handler_rows(browser: &Browser) -> Vec<String> {
    let names = browser
        .script(
            "return [...document.querySelectorAll('#handlers tr')].map(r => r.dataset.handler)",
            json!([]),
        )
        .await;
    serde_json::from_value(names).unwrap_or_default()
}

/// The number the page shows in `field` of `handler`'s row.
async fn shown(browser: &Browser, handler: &str, field: &str) -> Option<u64> {
    let text = browser
        .script(
            "const c = document.querySelector(`#handlers tr[data-handler=\"${arguments[0]}\"] [data-field=\"${arguments[1]}\"]`); return c ? c.textContent : null",
            json!([handler, field]),
        )
        .await;
    text.as_str()?.replace(',', "").parse().ok()
}

/// Errors the page or the browser saw: the page's own record and the console's SEVERE lines.
async fn page_errors(browser: &Browser) -> Vec<String> {
    let mut errors: Vec<String> = browser
        .script(
            "return window.switchyardErrors || ['app.js did not run']",
            json!([]),
        )
        .await
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| e.to_string())
        .collect();
    errors.extend(
        browser
            .console()
            .await
            .into_iter()
            .filter(|e| e["level"] == "SEVERE")
            .map(|e| e["message"].to_string()),
    );
    errors
}

/// What a person would see wrong with the page's layout: a button not wholly inside its
/// card, a card whose content is wider than the card, a plot's labels overlapping each
/// other or cut off at the plot's edge.
const LAYOUT_PROBLEMS: &str = r#"
const problems = [];
const name = (card) => (card.querySelector('h2, figcaption') || {}).textContent || card.id;
for (const card of document.querySelectorAll('section, figure')) {
  if (!card.offsetParent || card.classList.contains('plots')) continue;
  const box = card.getBoundingClientRect();
  if (card.scrollWidth > card.clientWidth + 1) {
    problems.push(`${name(card)}: content ${card.scrollWidth}px wide in a card of ${card.clientWidth}px`);
  }
  for (const button of card.querySelectorAll('button')) {
    const r = button.getBoundingClientRect();
    if (r.left < box.left - 0.5 || r.right > box.right + 0.5) {
      problems.push(`${name(card)}: button "${button.textContent}" at ${Math.round(r.left)}..${Math.round(r.right)} outside the card at ${Math.round(box.left)}..${Math.round(box.right)}`);
    }
  }
}
for (const plot of document.querySelectorAll('.plot svg')) {
  const width = plot.viewBox.baseVal.width;
  const labels = [...plot.querySelectorAll('text')].map((t) => [t.textContent, t.getBBox()]);
  labels.forEach(([text, b], i) => {
    if (b.x < -0.5 || b.x + b.width > width + 0.5) {
      problems.push(`${plot.parentNode.id}: "${text}" cut off (${Math.round(b.x)}..${Math.round(b.x + b.width)} of ${width})`);
    }
    for (const [other, c] of labels.slice(i + 1)) {
      const sameRow = b.y < c.y + c.height && c.y < b.y + b.height;
      if (sameRow && b.x < c.x + c.width && c.x < b.x + b.width) {
        problems.push(`${plot.parentNode.id}: "${text}" overlaps "${other}"`);
      }
    }
  });
}
return problems;
"#;

/// The page's layout problems (see [`LAYOUT_PROBLEMS`]).
async fn layout_problems(browser: &Browser) -> Vec<String> {
    serde_json::from_value(browser.script(LAYOUT_PROBLEMS, json!([])).await).unwrap()
}

/// Where screenshot `name` is kept after the test: `$CARGO_TARGET_DIR/NAME`, else
/// `target/NAME`.
fn screenshot_copy(name: &str) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| support::root().join("target"), PathBuf::from)
        .join(name)
}

#[tokio::test]
async fn the_status_page_shows_live_handlers_and_pauses_one_with_the_token() {
    let t = TestDaemon::start(TWO_HANDLERS).await;
    assert_assets_served(&t).await;
    let churn = t.sim().start_churn(ChurnConfig {
        rate: 40.0,
        objects: 10,
        ..ChurnConfig::default()
    });
    let browser = Browser::start().await;
    browser.open(&t.url("/")).await;

    let rows = support::eventually("both handlers on the page", WAIT, async || {
        let rows = handler_rows(&browser).await;
        (rows.len() == 2).then_some(rows)
    })
    .await;
    let names: Vec<Value> = t.status_json().await["handlers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["name"].clone())
        .collect();
    assert_eq!(
        json!(rows),
        json!(names),
        "the config's handlers, as /status lists them"
    );
    let first = support::eventually("events handled", WAIT, async || {
        shown(&browser, "audit", "processed")
            .await
            .filter(|n| *n > 0)
    })
    .await;
    support::eventually("the count moving under churn", WAIT, async || {
        shown(&browser, "audit", "processed")
            .await
            .filter(|n| *n > first)
    })
    .await;

    let plotted = browser
        .script(
            "return ['#plot-rate path', '#plot-queue path', '#plot-latency rect'].map(s => document.querySelectorAll(s).length)",
            json!([]),
        )
        .await;
    assert_eq!(
        plotted,
        json!([2, 2, 6]),
        "a line per handler, three latency bars each"
    );

    assert_tables(&browser, &t).await;

    pause_with_the_token(&browser, &t).await;

    browser.click("#reload").await;
    shown_eventually(&browser, "#config", "(api) applied").await;
    let config = browser.text("#config").await;
    assert!(config.contains("1 applied, 0 rejected"), "{config}");
    assert!(config.contains("handlers: unchanged"), "the plan: {config}");
    churn.abort();

    let shot = t.dir().join("status-page.png");
    browser.screenshot(&shot).await;
    let copy = screenshot_copy("status-page.png");
    std::fs::copy(&shot, &copy).expect("copy the screenshot");
    println!("status page screenshot: {}", copy.display());
    let problems = layout_problems(&browser).await;
    assert!(
        problems.is_empty(),
        "{problems:#?} (see {})",
        copy.display()
    );
    let errors = page_errors(&browser).await;
    assert!(errors.is_empty(), "errors on the page: {errors:?}");

    browser.click(&button("audit", "resume")).await;
    support::eventually("audit resumed through the API", WAIT, async || {
        let (_, detail) = t.get("/handlers/audit").await;
        (detail["paused"] == Value::Bool(false)).then_some(())
    })
    .await;
    browser.stop().await;
    t.stop().await;
}

/// A wrong token gets the API's refusal on the page; the right one pauses `audit` (and only
/// it), as the API and the page then show.
async fn pause_with_the_token(browser: &Browser, t: &TestDaemon) {
    // A wrong token: the API's refusal is shown, nothing changes.
    browser.type_into("#token", "wrong").await;
    browser.click("#token-save").await;
    browser.click(&button("audit", "pause")).await;
    shown_eventually(browser, "#message", "the bearer token is not valid").await;
    // The browser logs the refused request itself; nothing else may be there.
    let logged = browser.console().await;
    let unexpected: Vec<_> = logged
        .iter()
        .filter(|e| e["level"] == "SEVERE" && !e["message"].to_string().contains("401"))
        .collect();
    assert!(unexpected.is_empty(), "{unexpected:?}");
    browser.clear("#token").await;
    browser.type_into("#token", support::TOKEN).await;
    browser.click("#token-save").await;
    browser.click(&button("audit", "pause")).await;
    support::eventually("audit paused through the API", WAIT, async || {
        let (_, detail) = t.get("/handlers/audit").await;
        (detail["paused"] == Value::Bool(true)).then_some(())
    })
    .await;
    let (_, other) = t.get("/handlers/log-events").await;
    assert_eq!(other["paused"], false, "only the clicked handler pauses");
    let state = "#handlers tr[data-handler=\"audit\"] [data-field=\"state\"]";
    shown_eventually(browser, state, "paused").await;
}

/// The page and its files answer without a token, each with its type and the strict CSP.
async fn assert_assets_served(t: &TestDaemon) {
    let types = ["text/html", "text/css", "text/javascript", "image/svg+xml"];
    for (path, kind) in switchyard::admin::page::PATHS.iter().zip(types) {
        let answer = reqwest::get(t.url(path)).await.unwrap();
        assert_eq!(
            answer.status().as_u16(),
            200,
            "{path} needs no token on loopback"
        );
        let header = |name: &str| answer.headers()[name].to_str().unwrap().to_string();
        assert!(header("content-type").starts_with(kind), "{path}");
        let csp = header("content-security-policy");
        assert_eq!(
            csp,
            switchyard::admin::page::CONTENT_SECURITY_POLICY,
            "{path}"
        );
        assert!(
            csp.starts_with("default-src 'none'; script-src 'self';"),
            "{csp}"
        );
    }
}

/// The selector of `handler`'s `action` button.
fn button(handler: &str, action: &str) -> String {
    format!("#handlers tr[data-handler=\"{handler}\"] button[data-action=\"{action}\"]")
}

/// Waits until the element `css` selects shows `text`.
async fn shown_eventually(browser: &Browser, css: &str, text: &str) {
    support::eventually(&format!("{css} showing {text:?}"), WAIT, async || {
        browser.text(css).await.contains(text).then_some(())
    })
    .await;
}

/// The informers, routes and plugins tables show what the API reports.
async fn assert_tables(browser: &Browser, t: &TestDaemon) {
    let informers = browser.text("#informers").await;
    assert!(informers.contains("v1/configmaps"), "{informers}");
    let routes = browser.text("#routes").await;
    assert!(
        routes.contains("mainlog-events") && routes.contains("auditaudit"),
        "{routes}"
    );
    let (_, plugins) = t.get("/plugins").await;
    let sha = plugins["plugins"][0]["sha256"].as_str().unwrap();
    shown_eventually(browser, "#plugins", &sha[..12]).await;
}

#[tokio::test]
async fn where_reads_need_the_token_the_page_asks_for_it() {
    let yaml = format!(
        "{TWO_HANDLERS}  - name: widgets\n    resource: example.com/v1/widgets\n    handler: audit\n"
    );
    let t = TestDaemon::builder(&yaml)
        .admin_listen("0.0.0.0:0")
        .start()
        .await;
    let url = t.url("/").replace("0.0.0.0", "127.0.0.1");
    let browser = Browser::start().await;
    browser.open(&url).await;
    let prompt_shown = "return !document.getElementById('prompt').hidden";
    support::eventually("the token prompt", WAIT, async || {
        (browser.script(prompt_shown, json!([])).await == true).then_some(())
    })
    .await;
    assert!(
        handler_rows(&browser).await.is_empty(),
        "nothing shown without the token"
    );

    browser.type_into("#token", support::TOKEN).await;
    browser.click("#token-save").await;
    support::eventually("the handlers once the token is given", WAIT, async || {
        (handler_rows(&browser).await.len() == 2).then_some(())
    })
    .await;
    assert_eq!(browser.script(prompt_shown, json!([])).await, false);
    let waiting = browser.text("#waiting").await;
    assert!(
        waiting.contains("example.com/v1/widgets") && waiting.ends_with("widgets"),
        "the resource the widgets route waits for: {waiting}"
    );
    assert_eq!(
        browser
            .script(
                "return document.getElementById('waiting-section').hidden",
                json!([])
            )
            .await,
        false
    );
    let stored = browser
        .script(
            "return [localStorage.length, sessionStorage.getItem('switchyard-admin-token')]",
            json!([]),
        )
        .await;
    assert_eq!(
        stored,
        json!([0, support::TOKEN]),
        "the token stays in the tab"
    );
    let errors = page_errors(&browser).await;
    // The 401 answers before the token was given are the browser's network log, not the page's.
    let errors: Vec<_> = errors.into_iter().filter(|e| !e.contains("401")).collect();
    assert!(errors.is_empty(), "errors on the page: {errors:?}");
    browser.stop().await;
    t.stop().await;
}

const FAULTY: &str = "
handlers:
  faulty:
    max_retries: 1
    backoff_base: 10ms
    backoff_cap: 20ms
routes:
  - name: configmaps
    resource: configmaps
    handler: faulty
";

#[tokio::test]
async fn the_page_shows_dead_letters_and_errors_and_retries_purges_and_reloads() {
    let t = TestDaemon::start(FAULTY).await;
    t.create_configmap(json!({
        "metadata": {"name": "broken", "annotations": {"faulty/error": "cannot reach the billing API"}},
    }))
    .await;
    let browser = Browser::start().await;
    browser.open(&t.url("/")).await;
    browser.type_into("#token", support::TOKEN).await;
    browser.click("#token-save").await;
    let letters = "#handlers tr[data-handler=\"faulty\"] [data-field=\"dead_letters\"]";
    shown_eventually(&browser, letters, "1").await;
    let last = browser.text("#last-errors").await;
    assert!(
        last.contains("configmaps/default/broken") && last.contains("cannot reach the billing API"),
        "{last}"
    );

    browser.click(&button("faulty", "retry")).await;
    shown_eventually(&browser, "#message", "retry faulty: 1 retried").await;
    shown_eventually(&browser, letters, "1").await;
    browser.click(&button("faulty", "purge")).await;
    browser.accept_alert().await;
    shown_eventually(&browser, "#message", "purge faulty: 1 purged").await;
    let (_, detail) = t.get("/handlers/faulty").await;
    assert_eq!(detail["dead_letters"], 0, "{detail}");

    browser
        .click("#plugins tr[data-plugin=\"faulty\"] button[data-action=\"plugin-reload\"]")
        .await;
    shown_eventually(&browser, "#message", "reload plugin faulty: swapped").await;
    let (_, plugins) = t.get("/plugins").await;
    assert_eq!(plugins["plugins"][0]["swaps"], 2, "{plugins}");
    let errors = page_errors(&browser).await;
    assert!(errors.is_empty(), "errors on the page: {errors:?}");
    browser.stop().await;
    t.stop().await;
}

/// A fast handler beside one whose plugin sleeps on an object (call latencies three powers
/// of ten and more apart), and one whose plugin is not built yet (its row in the plugins table
/// names the missing file, a long path).
const FAST_AND_SLOW: &str = "
handlers:
  log-events: {}
  faulty: {}
  unbuilt:
    plugin: not-built-yet
routes:
  - name: all
    resource: configmaps
    handler: log-events
  - name: slow
    resource: configmaps
    labels: app=slow
    handler: faulty
  - name: unbuilt
    resource: configmaps
    labels: app=none
    handler: unbuilt
";

/// A newcomer's report: the plugins' reload buttons stuck out of their card, and the
/// latency axis drew `100 ms1,000 ms` when a slow handler stretched it over many powers of
/// ten. Every button stays inside its card and no two labels of a plot overlap.
#[tokio::test]
async fn buttons_stay_inside_their_cards_and_the_latency_axis_labels_apart() {
    let t = TestDaemon::builder(FAST_AND_SLOW)
        .plugin_file("log-events", "log-events")
        .plugin_file("faulty", "faulty")
        .start()
        .await;
    t.create_configmap(json!({
        "metadata": {"name": "slow", "labels": {"app": "slow"}, "annotations": {"faulty/sleep-ms": "1500"}},
    }))
    .await;
    for i in 0..5 {
        t.create_configmap(json!({"metadata": {"name": format!("fast-{i}")}}))
            .await;
    }
    let browser = Browser::start().await;
    browser.open(&t.url("/")).await;
    support::eventually("both handlers' latency bars", WAIT, async || {
        let bars = browser
            .script(
                "return document.querySelectorAll('#plot-latency rect').length",
                json!([]),
            )
            .await;
        (bars == 6).then_some(())
    })
    .await;
    shown_eventually(&browser, "#plugins", "not-built-yet.wasm").await;
    let shot = t.dir().join("status-page-layout.png");
    browser.screenshot(&shot).await;
    let copy = screenshot_copy("status-page-layout.png");
    std::fs::copy(&shot, &copy).expect("copy the screenshot");
    let decades = browser
        .script(
            "return document.querySelectorAll('#plot-latency line.grid').length",
            json!([]),
        )
        .await;
    assert!(
        decades.as_u64() >= Some(5),
        "the axis spans four powers of ten or more (1 ms or less to 10 s): {decades} lines"
    );
    let problems = layout_problems(&browser).await;
    assert!(
        problems.is_empty(),
        "{problems:#?} (see {})",
        copy.display()
    );
    assert!(page_errors(&browser).await.is_empty());
    browser.stop().await;
    t.stop().await;
}

/// One replica in sharded mode whose handler has a shadow plugin.
const SHARDED_WITH_SHADOW: &str = "
ha:
  mode: sharded
  lease_namespace: default
  lease_name: page
  lease_duration: 6s
  renew_deadline: 4s
  retry_period: 300ms
  identity: page-replica
handlers:
  guard:
    plugin: label-guard
    shadow: faulty
    config: {label: owner, value: team-a}
    capabilities:
      configmaps: [patch]
routes:
  - {name: cms, resource: configmaps, handler: guard}
";

#[tokio::test]
async fn the_page_shows_the_replica_its_shards_and_a_handlers_shadow() {
    let t = TestDaemon::builder(SHARDED_WITH_SHADOW)
        .plugin_file("label-guard", "label-guard")
        .plugin_file("faulty", "faulty")
        .start()
        .await;
    let _churn = t.sim().start_churn(ChurnConfig {
        rate: 20.0,
        objects: 5,
        ..ChurnConfig::default()
    });
    let browser = Browser::start().await;
    browser.open(&t.url("/")).await;

    shown_eventually(&browser, "#replica [data-field=mode]", "sharded").await;
    shown_eventually(&browser, "#replica [data-field=identity]", "page-replica").await;
    shown_eventually(&browser, "#replica [data-field=members]", "1: page-replica").await;
    shown_eventually(
        &browser,
        "#replica [data-field=owns]",
        "(100.0% of objects)",
    )
    .await;
    let status = t.status_json().await;
    let range = status["replica"]["shards"]["ranges"][0].as_str().unwrap();
    shown_eventually(&browser, "#replica [data-field=owns]", range).await;

    shown_eventually(&browser, "#shadows tr[data-handler=guard]", "faulty").await;
    // Columns: handler, shadow plugin, compared, same, other outcome, other writes, ...
    let first = support::eventually("shadow comparisons on the page", WAIT, async || {
        shadow_cell(&browser, 2).await.filter(|n| *n > 0)
    })
    .await;
    let shadow = &t.status_json().await["handlers"][0]["shadow"];
    assert!(shadow["compared"].as_u64().unwrap() >= first, "{shadow}");
    // label-guard patches the label; faulty writes nothing: their writes differ.
    support::eventually("write differences on the page", WAIT, async || {
        shadow_cell(&browser, 5).await.filter(|n| *n > 0)
    })
    .await;
    assert!(page_errors(&browser).await.is_empty());
}

/// The number in column `index` of the shadows table's `guard` row.
async fn shadow_cell(browser: &Browser, index: usize) -> Option<u64> {
    let cells = browser
        .script(
            "const r = document.querySelector('#shadows tr[data-handler=guard]'); return r ? [...r.cells].map(c => c.textContent) : null",
            json!([]),
        )
        .await;
    let cells: Vec<String> = serde_json::from_value(cells).ok()?;
    cells.get(index)?.replace(',', "").parse().ok()
}

#[tokio::test]
async fn the_page_shows_outbound_requests_per_destination() {
    let receiver = crate::support::receiver::Receiver::start().await;
    let base = receiver.url("http");
    let t = TestDaemon::builder(&format!(
        "
handlers:
  notify:
    plugin: outbound
    config: {{url: \"{base}/events\"}}
    capabilities:
      http: [\"{base}\"]
routes:
  - {{name: cms, resource: configmaps, handler: notify}}
"
    ))
    .plugin_file("outbound", "outbound")
    .start()
    .await;
    t.create_configmap(json!({"metadata": {"name": "a"}})).await;
    let browser = Browser::start().await;
    browser.open(&t.url("/")).await;
    // Columns: handler, destination, requests, errors, refused, p99.
    shown_eventually(&browser, "#outbound tr[data-handler=notify]", &base).await;
    let cells = support::eventually("a request on the page", WAIT, async || {
        let cells = browser
            .script(
                "const r = document.querySelector('#outbound tr[data-handler=notify]'); return r ? [...r.cells].map(c => c.textContent) : null",
                json!([]),
            )
            .await;
        let cells: Vec<String> = serde_json::from_value(cells).ok()?;
        (cells.get(2).map(String::as_str) == Some("1")).then_some(cells)
    })
    .await;
    assert_eq!(cells[3], "0", "{cells:?}");
    assert!(cells[5].ends_with(" ms"), "{cells:?}");
    assert!(page_errors(&browser).await.is_empty());
}

/// A handler quarantined (every call fails), one waiting for a Secret, one whose plugin is
/// being pulled from a registry that never answers, and a state store.
fn troubled(remote: &str) -> String {
    format!(
        "state_dir: state
handlers:
  billing:
    plugin: faulty
    max_retries: 1000
    backoff_base: 5ms
    backoff_cap: 5ms
    qps: 0
    quarantine_after: 2
    quarantine_backoff: 10m
  alerts:
    plugin: log-events
    config:
      url: {{valueFrom: {{secretKeyRef: {{name: slack, key: url}}}}}}
  remote:
    plugin: {remote}
routes:
  - name: billing
    resource: configmaps
    handler: billing
  - name: alerts
    resource: configmaps
    handler: alerts
  - name: remote
    resource: configmaps
    handler: remote
"
    )
}

/// The state cell of `handler`'s row.
fn state_cell(handler: &str) -> String {
    format!("#handlers tr[data-handler=\"{handler}\"] [data-field=\"state\"]")
}

/// A newcomer's report: a quarantined handler showed as a green "running", and what a
/// handler waited for was only in a tooltip. The state cell says quarantined, waiting or
/// pulling with the reason under it, the plugin cell says pulling, and the state store's
/// section shows its backpressure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_a_quarantine_what_a_handler_waits_for_a_pull_and_the_store() {
    let registry = Hostile::start(|_| Reply::Never).await;
    let remote = registry.reference("plugins/silent:v1");
    let t = TestDaemon::builder(&troubled(&remote))
        .plugin_file("faulty", "faulty")
        .plugin_file("log-events", "log-events")
        .start()
        .await;
    for name in ["a", "b", "c"] {
        t.create_configmap(json!({"metadata": {"name": name,
            "annotations": {"faulty/error": "cannot reach the billing API"}}}))
            .await;
    }
    let browser = Browser::start().await;
    browser.open(&t.url("/")).await;
    shown_eventually(&browser, &state_cell("billing"), "quarantined").await;
    let billing = browser.text(&state_cell("billing")).await;
    assert!(
        billing.contains("next try") && billing.contains("cannot reach the billing API"),
        "{billing}"
    );
    assert!(!billing.contains("running"), "{billing}");
    let alerts = browser.text(&state_cell("alerts")).await;
    assert!(
        alerts.starts_with("waiting") && alerts.contains("Secret default/slack not found"),
        "{alerts}"
    );
    assert!(
        browser
            .text(&state_cell("remote"))
            .await
            .starts_with("pulling")
    );
    let plugin = "#handlers tr[data-handler=\"remote\"] [data-field=\"plugin\"]";
    assert!(browser.text(plugin).await.contains("(pulling…)"));
    let store = browser.text("#state").await;
    assert!(store.contains("backpressureno ("), "{store}");

    // The store under backpressure, as /status reports it then: the page says so.
    let mut status = t.status_json().await;
    status["state"]["backpressure"] = json!(true);
    status["state"]["backpressure_waits"] = json!(3);
    let shown = browser
        .script(
            "render(arguments[0]); return document.getElementById('state').textContent",
            json!([status]),
        )
        .await;
    let shown = shown.as_str().unwrap_or_default();
    assert!(
        shown.contains("yes: the informers wait for the store (3 waits so far)"),
        "{shown}"
    );
    let errors = page_errors(&browser).await;
    assert!(errors.is_empty(), "errors on the page: {errors:?}");
    browser.stop().await;
    t.stop().await;
}
