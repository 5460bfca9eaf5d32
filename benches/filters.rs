//! Subscription rule evaluation on one thread: a set of 100 rules (correlation filters, SQL
//! filters with `LIKE`, `IN` lists and numeric comparisons, the TrueFilter `1=1`) against
//! messages with 8 application properties, the way a topic evaluates each subscription's
//! rules for each message it routes.
//!
//! `cargo bench --bench filters -- [--seconds N]`
//!
//! Prints rule evaluations per second over the whole set (the aim: at least one million),
//! then the rate of each kind of rule alone, of parsing, and of applying a SQL action.

use std::hint::black_box;
use std::time::{Duration, Instant};

use tidebus::filter::{CorrelationFilter, Filter, MessageView, SqlAction, SqlFilter, Value};

/// Distinct messages the rules run against, cycled.
const MESSAGES: usize = 64;
/// The aim, in rule evaluations per second on one core.
const AIM: f64 = 1_000_000.0;

const REGIONS: [&str; 5] = ["eu", "us", "apac", "latam", "mea"];
const COUNTRIES: [&str; 12] = [
    "de", "fr", "nl", "be", "lu", "us", "ca", "mx", "jp", "sg", "br", "za",
];
const EVENTS: [&str; 4] = [
    "order.created",
    "order.paid",
    "order.shipped",
    "order.cancelled",
];

/// One kind of rule in the set, for the per-kind figures.
struct Kind {
    name: &'static str,
    rules: Vec<Filter>,
}

fn main() -> Result<(), String> {
    let seconds = seconds_flag()?;
    let kinds = rule_set()?;
    let rules: Vec<&Filter> = kinds.iter().flat_map(|kind| &kind.rules).collect();
    let messages: Vec<MessageView> = (0..MESSAGES).map(message).collect();
    let per_kind: Vec<String> = kinds
        .iter()
        .map(|kind| format!("{} {}", kind.rules.len(), kind.name))
        .collect();
    println!("rules: {} ({})", rules.len(), per_kind.join(", "));
    println!(
        "messages: {} distinct, {} application properties each",
        messages.len(),
        messages[0].application_properties.len()
    );

    // Warm up, then measure the whole set.
    run(&rules, &messages, Duration::from_millis(300));
    let whole = run(&rules, &messages, Duration::from_secs(seconds));
    println!(
        "all rules: {:.2} M rule evaluations/s ({:.0} ns each), {:.1} of {} rules match a message, {} evaluation errors",
        whole.rate() / 1e6,
        whole.nanos_each(),
        whole.matches as f64 / (whole.evaluations as f64 / rules.len() as f64),
        rules.len(),
        whole.errors
    );
    println!(
        "aim: at least {:.0} M/s on one core: {}",
        AIM / 1e6,
        if whole.rate() >= AIM {
            "met"
        } else {
            "NOT met"
        }
    );

    for kind in &kinds {
        let rules: Vec<&Filter> = kind.rules.iter().collect();
        let alone = run(&rules, &messages, Duration::from_secs(1));
        println!(
            "  {:<28} {:>7.2} M/s ({:.0} ns each)",
            kind.name,
            alone.rate() / 1e6,
            alone.nanos_each()
        );
    }

    let expressions = sql_expressions();
    let started = Instant::now();
    let mut parsed = 0_u64;
    while started.elapsed() < Duration::from_secs(1) {
        for expression in &expressions {
            black_box(SqlFilter::parse(black_box(expression)).map_err(|e| e.to_string())?);
            parsed += 1;
        }
    }
    println!(
        "parse: {:.0} k SQL filters/s",
        parsed as f64 / started.elapsed().as_secs_f64() / 1e3
    );

    let action = SqlAction::parse(
        "SET quantity = quantity * 2; SET sys.Label = sys.Label + '-routed'; REMOVE tenant;",
    )
    .map_err(|e| e.to_string())?;
    let started = Instant::now();
    let mut applied = 0_u64;
    while started.elapsed() < Duration::from_secs(1) {
        for view in &messages {
            black_box(action.apply(black_box(view)).map_err(|e| e.to_string())?);
            applied += 1;
        }
    }
    println!(
        "action (SET, SET sys.Label, REMOVE): {:.2} M applications/s",
        applied as f64 / started.elapsed().as_secs_f64() / 1e6
    );
    Ok(())
}

/// `--seconds N` (default 3): how long to measure the whole rule set.
fn seconds_flag() -> Result<u64, String> {
    let mut args = std::env::args().skip(1).filter(|arg| arg != "--bench");
    let mut seconds = 3;
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--seconds" => {
                seconds = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .ok_or("--seconds needs a number")?;
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(seconds)
}

/// What one measurement counted.
struct Tally {
    evaluations: u64,
    matches: u64,
    errors: u64,
    elapsed: Duration,
}

impl Tally {
    fn rate(&self) -> f64 {
        self.evaluations as f64 / self.elapsed.as_secs_f64()
    }

    fn nanos_each(&self) -> f64 {
        self.elapsed.as_nanos() as f64 / self.evaluations as f64
    }
}

/// Evaluates every rule against every message, over and over, for about `length`.
fn run(rules: &[&Filter], messages: &[MessageView], length: Duration) -> Tally {
    let started = Instant::now();
    let mut tally = Tally {
        evaluations: 0,
        matches: 0,
        errors: 0,
        elapsed: Duration::ZERO,
    };
    while started.elapsed() < length {
        for view in messages {
            for rule in rules {
                match black_box(rule).matches(black_box(view)) {
                    Ok(true) => tally.matches += 1,
                    Ok(false) => {}
                    Err(_) => tally.errors += 1,
                }
            }
        }
        tally.evaluations += (messages.len() * rules.len()) as u64;
    }
    tally.elapsed = started.elapsed();
    tally
}

/// Message `n`: system properties and 8 application properties.
fn message(n: usize) -> MessageView {
    let string = |s: &str| Value::String(s.to_owned());
    let label = match n % 4 {
        0 | 1 => format!("order-{n}"),
        2 => format!("invoice-{n}"),
        _ => format!("order-{n}-urgent"),
    };
    MessageView {
        message_id: Some(format!("7f3c9b1e-0d4a-4c53-9a51-{n:012}")),
        correlation_id: Some(format!("corr-{}", n % 40)),
        to: None,
        reply_to: Some("replies".to_owned()),
        subject: Some(label),
        session_id: None,
        reply_to_session_id: None,
        content_type: Some("application/json".to_owned()),
        application_properties: vec![
            ("region".to_owned(), string(REGIONS[n % REGIONS.len()])),
            ("country".to_owned(), string(COUNTRIES[n % COUNTRIES.len()])),
            ("eventType".to_owned(), string(EVENTS[n % EVENTS.len()])),
            ("tenant".to_owned(), string(&format!("t{}", n % 30))),
            ("amount".to_owned(), Value::Int((n as i64 * 37) % 1_000)),
            ("price".to_owned(), Value::Float((n as f64) * 1.75)),
            ("quantity".to_owned(), Value::Int((n as i64 % 9) + 1)),
            ("priority".to_owned(), Value::Int(n as i64 % 5)),
        ],
        ..MessageView::default()
    }
}

/// The SQL filters of the set, as text.
fn sql_expressions() -> Vec<String> {
    let mut expressions = Vec::new();
    for i in 0..25 {
        let pattern = ["order-%", "invoice-%", "%-urgent"][i % 3];
        expressions.push(format!(
            "region = '{}' AND sys.Label LIKE '{pattern}'",
            REGIONS[i % REGIONS.len()]
        ));
    }
    for i in 0..20 {
        let list: Vec<String> = (0..5)
            .map(|k| format!("'{}'", COUNTRIES[(i + k) % COUNTRIES.len()]))
            .collect();
        let not = if i % 4 == 3 { "NOT " } else { "" };
        expressions.push(format!("country {not}IN ({})", list.join(", ")));
    }
    for i in 0..20 {
        expressions.push(match i % 4 {
            0 => format!("amount > {} AND priority >= {}", i * 40, i % 5),
            1 => format!("amount * quantity > {}", 500 + i * 100),
            2 => format!("price >= {}.5 AND price < {}.9", i, i + 40),
            _ => format!("priority = {} OR amount <= {}", i % 5, i * 10),
        });
    }
    expressions.push("EXISTS(coupon) AND coupon IS NOT NULL".to_owned());
    expressions
        .push("sys.ContentType = 'application/json' AND eventType <> 'order.cancelled'".to_owned());
    expressions.push("sys.CorrelationId IN ('corr-1', 'corr-2') OR tenant LIKE 't1%'".to_owned());
    expressions.push("NOT (region = 'us' AND amount < 100)".to_owned());
    expressions
}

/// 100 rules: 30 correlation filters, 69 SQL filters, and `1=1`.
fn rule_set() -> Result<Vec<Kind>, String> {
    let correlation = (0..30)
        .map(|i| {
            Filter::Correlation(match i % 3 {
                0 => CorrelationFilter {
                    correlation_id: Some(format!("corr-{i}")),
                    ..CorrelationFilter::default()
                },
                1 => CorrelationFilter {
                    properties: vec![
                        (
                            "eventType".to_owned(),
                            Value::String(EVENTS[i % EVENTS.len()].to_owned()),
                        ),
                        ("tenant".to_owned(), Value::String(format!("t{i}"))),
                    ],
                    ..CorrelationFilter::default()
                },
                _ => CorrelationFilter {
                    subject: Some(format!("order-{i}")),
                    content_type: Some("application/json".to_owned()),
                    ..CorrelationFilter::default()
                },
            })
        })
        .collect();
    let sql = sql_expressions()
        .iter()
        .map(|expression| {
            SqlFilter::parse(expression)
                .map(Filter::Sql)
                .map_err(|e| format!("{expression}: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut sql = sql.into_iter();
    let mut take = |n: usize| sql.by_ref().take(n).collect::<Vec<_>>();
    let true_filter = SqlFilter::parse("1=1").map_err(|e| e.to_string())?;
    Ok(vec![
        Kind {
            name: "correlation",
            rules: correlation,
        },
        Kind {
            name: "SQL = AND LIKE",
            rules: take(25),
        },
        Kind {
            name: "SQL IN / NOT IN",
            rules: take(20),
        },
        Kind {
            name: "SQL numeric",
            rules: take(20),
        },
        Kind {
            name: "SQL other",
            rules: take(4),
        },
        Kind {
            name: "SQL 1=1 (TrueFilter)",
            rules: vec![Filter::Sql(true_filter)],
        },
    ])
}
