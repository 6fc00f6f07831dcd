//! `wink serve` against clients that send what they should not: cursors edited by hand or
//! carried to another listing, tids far in the future. Each answer is a 4xx that changes nothing
//! and names no file; the server goes on as before.

mod common;

use common::server::{agent, call, create_bucket, get, put, Server};
use wink::store::key;

const HTML: &str = "text/html; charset=utf-8";

/// A tid `secs` seconds past now.
fn tid_in(secs: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    key::tid_at(now + secs, 7, *b"client").to_string()
}

#[test]
fn a_cursor_is_taken_only_from_this_server_and_for_its_listing() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("root"), &[]);
    let ag = agent();
    create_bucket(&s, "a", "{}");
    create_bucket(&s, "b", "{}");
    for t in 0..30 {
        for bucket in ["a", "b"] {
            assert_eq!(
                put(&ag, &s.p(bucket, &format!("/T{t}/1")), HTML, b"x").status,
                201
            );
        }
    }
    for rev in 2..6 {
        put(&ag, &s.p("a", &format!("/T0/{rev}")), HTML, b"y");
    }
    let next = |url: String| get(&ag, &url).json()["next"].as_str().unwrap().to_string();
    let titles = next(s.p("a", "/?limit=5"));
    let renders = next(s.p("a", "/T0/?limit=2"));
    // Cursors given by the server page on.
    assert_eq!(get(&ag, &s.p("a", &format!("/?next={titles}"))).status, 200);
    assert_eq!(
        get(&ag, &s.p("a", &format!("/T0/?next={renders}"))).status,
        200
    );
    // A position typed by hand (a store cursor's own shape), a cursor changed by one
    // character, one given for another bucket, domain or title, a render cursor for titles.
    let mut changed = titles.clone().into_bytes();
    changed[3] = if changed[3] == b'A' { b'B' } else { b'A' };
    let changed = String::from_utf8(changed).unwrap();
    let other_domain = s
        .p("a", &format!("/?next={titles}"))
        .replace("en.wikipedia.org", "de.wikipedia.org");
    for url in [
        s.p("a", "/?next=h4369"),
        s.p("a", "/?next=a1"),
        s.p("a", &format!("/?next={changed}")),
        s.p("b", &format!("/?next={titles}")),
        other_domain,
        s.p("a", &format!("/T1/?next={renders}")),
        s.p("a", &format!("/?next={renders}")),
        s.p("a", &format!("/?next={}", "A".repeat(5000))),
    ] {
        let a = get(&ag, &url);
        let j = a.problem(400, "bad_request");
        let detail = j["detail"].as_str().unwrap_or_default();
        assert!(detail.contains("invalid next"), "{url}: {j}");
        assert!(
            !String::from_utf8_lossy(&a.body).contains(&*dir.path().to_string_lossy()),
            "{url}: a path in the answer"
        );
    }
    // A restart keeps the key: a cursor given before it still pages.
    drop(s);
    let s = Server::start(&dir.path().join("root"), &[]);
    assert_eq!(get(&ag, &s.p("a", &format!("/?next={titles}"))).status, 200);
}

#[test]
fn a_tid_far_past_the_clock_is_refused_and_moves_no_clock() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("root"), &[]);
    let ag = agent();
    create_bucket(&s, "b", "{}");
    // The year 3000: refused, nothing stored.
    let far = key::tid_at(32_503_680_000, 1, *b"future").to_string();
    let a = put(&ag, &s.p("b", &format!("/Evil/1/{far}")), HTML, b"evil");
    let j = a.problem(400, "bad_request");
    assert!(
        j["detail"]
            .as_str()
            .unwrap()
            .contains("past this store's clock"),
        "{j}"
    );
    assert_eq!(get(&ag, &s.p("b", "/Evil")).status, 404);
    // Two hours ahead: refused; half an hour ahead (a client's clock running fast): taken.
    put(
        &ag,
        &s.p("b", &format!("/Evil/1/{}", tid_in(7200))),
        HTML,
        b"x",
    )
    .problem(400, "bad_request");
    let soon = tid_in(1800);
    assert_eq!(
        put(&ag, &s.p("b", &format!("/Evil/1/{soon}")), HTML, b"soon").status,
        201
    );
    // A tid-less PUT of the same revision comes after it; of another title, the clock's own.
    let a = put(&ag, &s.p("b", "/Evil/1"), HTML, b"after");
    assert_eq!(a.status, 201);
    let a = put(&ag, &s.p("b", "/Other/1"), HTML, b"other");
    assert_eq!(a.status, 201);
    let tid = a.json()["tid"].as_str().unwrap().to_string();
    let made = key::tid_unix_secs(key::parse_tid(&tid).unwrap());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!((made - now).abs() < 60, "{tid} is the clock's");
    // A read as of now finds the render the clock made.
    let url = s.p("b", &format!("/Other?as_of={}", now + 1));
    let a = call(&ag, "GET", &url, &[], None);
    assert_eq!((a.status, a.body.as_slice()), (200, b"other".as_slice()));
}
