//! `wink cluster repair URL` on a real cluster on loopback (3 nats-servers, 3 Wink nodes,
//! HAProxy), with differences made in one owner's store while it was stopped:
//! - a render planted on that owner only is copied to the other owner;
//! - a title whose data is all gone on that owner is restored from the other;
//! - a take-down present on that owner only is applied on the other;
//! - a value damaged in that owner's container file is found by the checking digest,
//!   quarantined there (never served), and copied back from the healthy owner, whose files do
//!   not change; both owners then answer the right bytes.
//!
//! After each repair, `verify --check` finds nothing. The repair routes refuse what is not a
//! repair (400, 405, 503 off the owner's partitions) and change nothing.
#![cfg(feature = "cluster")]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::cluster::{owners, put_once, wink_cluster, Attempt, Cluster, D};
use common::server::try_call;
use wink::cluster::message::{partition_of, Change, Kind};
use wink::store::{Labels, Put, Store, StoreOptions};

const PARTITIONS: u32 = 4;

/// `wink cluster VERB URL ARGS`, waiting up to 60 s for the owners: exit code, stdout, stderr.
fn run(verb: &str, url: &str, args: &[&str]) -> (i32, String, String) {
    let args: Vec<&str> = ["--patience", "60"].iter().chain(args).copied().collect();
    wink_cluster(verb, url, &args)
}

/// The value of `title` revision `rev` as owner `url` answers it from its own store.
fn get_from(agent: &ureq::Agent, url: &str, title: &str, rev: u64) -> (u16, Vec<u8>) {
    let a = try_call(
        agent,
        "GET",
        &format!("{url}/{D}/sys/key_rev_value/html/{title}/{rev}"),
        &[("x-wink-forwarded", "1")],
        None,
    )
    .unwrap();
    (a.status, a.body)
}

/// The container datafiles of a node's `html` store, with their bytes.
fn containers(data: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let dir = data.join("html");
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with('c') && name.ends_with(".data") {
            out.insert(p.clone(), std::fs::read(&p).unwrap());
        }
    }
    out
}

/// Flips a byte in the middle of `value` in the container file of `data`'s store that holds it.
fn damage(data: &Path, value: &[u8]) {
    for (path, mut bytes) in containers(data) {
        if let Some(at) = bytes.windows(value.len()).position(|w| w == value) {
            bytes[at + value.len() / 2] ^= 0x40;
            std::fs::write(&path, bytes).unwrap();
            return;
        }
    }
    panic!("the value is in no container of {}", data.display());
}

#[test]
fn repair_copies_what_an_owner_lacks_and_replaces_a_damaged_value_from_a_healthy_owner() {
    if !common::cluster::tools("the cluster repair test") {
        return;
    }
    let cluster = Cluster::up(3, 2, PARTITIONS);
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .build();
    let puts: Vec<Attempt> = (0..12)
        .map(|i| {
            let a = put_once(
                &agent,
                &cluster.router,
                0,
                format!("Repair_{i}"),
                1 + i as u64,
            );
            assert!(a.acked.is_some(), "PUT {} was not acknowledged", a.title);
            a
        })
        .collect();
    let (code, out, err) = run("repair", &cluster.router, &[]);
    assert_eq!(code, 0, "repair of a healthy cluster: {out} {err}");
    assert!(out.contains("repaired: 0 actions"), "{out}");

    let (code, out, err) = cluster.wink("status", &[]);
    assert_eq!(code, 0, "wink cluster status: {err}");
    let status: serde_json::Value = serde_json::from_str(&out).unwrap();
    let owners_of = |t: &str| owners(&status, t, PARTITIONS);
    let victim = owners_of(&puts[0].title)[0].clone();
    let other_of = |t: &str| {
        owners_of(t)
            .into_iter()
            .find(|o| *o != victim)
            .expect("a second owner")
    };
    // Three titles the victim owns: one to lose, one to take down, one to damage.
    let mine: Vec<&Attempt> = puts
        .iter()
        .filter(|a| owners_of(&a.title).contains(&victim))
        .collect();
    assert!(mine.len() >= 3, "{victim} owns too few of the titles");
    let (lost, down, damaged) = (mine[0], mine[1], mine[2]);
    let part = partition_of(D, &puts[0].title, PARTITIONS);
    let planted = (0..)
        .map(|i| format!("Planted_{i}"))
        .find(|t| partition_of(D, t, PARTITIONS) == part)
        .unwrap();
    let planted_value = b"<p>planted on one owner only</p>";
    let (victim_url, victim_data) = cluster.node(&victim);

    // 1, 2 and a take-down: made in the victim's store while it is stopped.
    cluster.ctl("stop", &victim);
    {
        let mut s = Store::open(&victim_data.join("html"), &StoreOptions::writer()).unwrap();
        s.put(&Put {
            domain: D,
            title: &planted,
            rev: 7,
            tid: None,
            content_type: "text/html",
            labels: &Labels::NONE,
            value: planted_value,
            historical: false,
        })
        .unwrap();
        // All of the title's data gone: its renders removed, and no take-down left either.
        s.take_down(D, &lost.title, None).unwrap();
        assert!(s.lift(D, &lost.title, None).unwrap());
        s.take_down(D, &down.title, None).unwrap();
    }
    cluster.ctl("start", &victim);

    let (code, out, err) = run("repair", &cluster.router, &[]);
    eprintln!("repair of the planted differences:\n{out}{err}");
    assert_eq!(code, 0, "repair: {out} {err}");
    let line_of = |out: &str, t: &str| {
        out.lines()
            .find(|l| l.contains(&format!("{D}/{t}:")))
            .unwrap_or_else(|| panic!("no action named for {t}: {out}"))
            .to_string()
    };
    let l = line_of(&out, &planted);
    let o = other_of(&planted);
    assert!(
        l.contains("copied render 7/") && l.contains(&format!("from {victim} to {o}: stored")),
        "{l}"
    );
    let l = line_of(&out, &lost.title);
    let o = other_of(&lost.title);
    assert!(
        l.contains(&format!(
            "copied render {}/{}",
            lost.rev,
            lost.acked.as_ref().unwrap().0
        )) && l.contains(&format!("from {o} to {victim}: stored")),
        "{l}"
    );
    let l = line_of(&out, &down.title);
    let o = other_of(&down.title);
    assert!(
        l.contains(&format!(
            "copied the title's take-down from {victim} to {o}: 1 renders removed"
        )),
        "{l}"
    );
    assert_eq!(
        out.lines().filter(|l| l.contains(" copied ")).count(),
        3,
        "exactly three actions: {out}"
    );
    let (code, out, err) = run("verify", &cluster.router, &["--check"]);
    assert_eq!(code, 0, "verify after the repair: {out} {err}");
    // Every owner answers what was copied to it, from its own store.
    let o = other_of(&planted);
    let (status_code, body) = get_from(&agent, &cluster.node(&o).0, &planted, 7);
    assert_eq!(status_code, 200, "the planted render from {o}");
    assert_eq!(body, planted_value);
    let (status_code, body) = get_from(&agent, &victim_url, &lost.title, lost.rev);
    assert_eq!(status_code, 200, "the lost title from {victim}");
    assert!(
        body == lost.body,
        "the lost title: other bytes from {victim}"
    );
    for node in owners_of(&down.title) {
        let (status_code, _) = get_from(&agent, &cluster.node(&node).0, &down.title, down.rev);
        assert!(
            status_code == 404 || status_code == 410,
            "the taken-down title from {node}: {status_code}"
        );
    }

    // 3: a value damaged on disk on the victim.
    let healthy = other_of(&damaged.title);
    let (healthy_url, healthy_data) = cluster.node(&healthy);
    cluster.ctl("stop", &victim);
    damage(&victim_data, &damaged.body);
    cluster.ctl("start", &victim);
    let healthy_before = containers(&healthy_data);

    // The recorded CRCs still agree: only the checking digest sees the damage.
    let (code, out, err) = run("verify", &cluster.router, &[]);
    assert_eq!(code, 0, "verify without --check: {out} {err}");
    let (code, out, err) = run("verify", &cluster.router, &["--check"]);
    eprintln!("verify --check of the damage:\n{out}{err}");
    assert_eq!(code, 1, "verify --check: {out} {err}");
    let found = out
        .lines()
        .find(|l| l.contains(&format!("node {victim}: {D}/{}", damaged.title)))
        .unwrap_or_else(|| panic!("the damage is not named: {out}"));
    assert!(
        found.contains("fails its check") && found.contains("quarantined"),
        "{found}"
    );
    assert!(!out.contains("/tmp"), "an answer names a file: {out}");
    let quarantine = victim_data.join("html").join("quarantine");
    let entries = std::fs::read_dir(&quarantine).unwrap().count();
    assert!(
        entries >= 2,
        "no quarantine entry in {}",
        quarantine.display()
    );
    // Quarantined: never served, and left out of the digest (the owners now differ).
    let (status_code, body) = get_from(&agent, &victim_url, &damaged.title, damaged.rev);
    assert!(
        status_code != 200 || body == damaged.body,
        "damaged bytes served by {victim}"
    );
    let (code, out, _) = run("verify", &cluster.router, &[]);
    assert_eq!(
        code, 1,
        "verify without --check after the quarantine: {out}"
    );
    assert!(
        line_of(&out, &damaged.title).contains(&format!("{victim} holds nothing")),
        "{out}"
    );

    let (code, out, err) = run("repair", &cluster.router, &[]);
    eprintln!("repair of the damage:\n{out}{err}");
    assert_eq!(code, 0, "repair of the damage: {out} {err}");
    let l = line_of(&out, &damaged.title);
    assert!(
        l.contains(&format!(
            "copied render {}/{} from {healthy} to {victim}: stored",
            damaged.rev,
            damaged.acked.as_ref().unwrap().0
        )),
        "{l}"
    );
    assert_eq!(
        out.lines().filter(|l| l.contains(" copied ")).count(),
        1,
        "one copy, from the healthy owner: {out}"
    );
    let (code, out, err) = run("verify", &cluster.router, &["--check"]);
    assert_eq!(code, 0, "verify --check after the repair: {out} {err}");
    assert!(
        containers(&healthy_data) == healthy_before,
        "the healthy owner's containers changed"
    );
    assert!(
        !healthy_data.join("html").join("quarantine").exists(),
        "a quarantine on the healthy owner"
    );
    for (node, url) in [(&victim, &victim_url), (&healthy, &healthy_url)] {
        let (status_code, body) = get_from(&agent, url, &damaged.title, damaged.rev);
        assert_eq!(status_code, 200, "the repaired title from {node}");
        assert!(
            body == damaged.body,
            "the repaired title: other bytes from {node}"
        );
    }

    // The repair routes refuse what is not a repair, and change nothing.
    let part = partition_of(D, &damaged.title, PARTITIONS);
    let repair = format!("{victim_url}/_cluster/repair/html/{part}");
    let call = |method: &str, url: &str, body: Option<&[u8]>| {
        let a = try_call(&agent, method, url, &[], body).unwrap();
        (a.status, String::from_utf8_lossy(&a.body).into_owned())
    };
    let change = |kind: Kind, title: &str| Change {
        kind,
        arrival: 1_700_000_000,
        rev: 1,
        tid: uuid::Uuid::nil(),
        domain: D.to_string(),
        title: title.to_string(),
        content_type: "text/html".to_string(),
        labels: Labels::NONE,
        value: b"<p>not a repair</p>".to_vec().into(),
        conditions: Default::default(),
        names_render: false,
    };
    let elsewhere = (0..)
        .map(|i| format!("Elsewhere_{i}"))
        .find(|t| partition_of(D, t, PARTITIONS) != part)
        .unwrap();
    let reserved = {
        let mut c = change(Kind::TakeDownTitle, "applied");
        c.domain = "wink.cluster".into();
        c.encode()
    };
    for (what, body) in [
        ("junk", b"junk".to_vec()),
        ("a lift", change(Kind::LiftTitle, &damaged.title).encode()),
        (
            "another partition's title",
            change(Kind::Put, &elsewhere).encode(),
        ),
        ("the reserved domain", reserved),
    ] {
        let (status_code, body) = call("POST", &repair, Some(&body));
        assert_eq!(status_code, 400, "{what}: {body}");
        assert!(!body.contains("/tmp"), "{what}: a path in {body}");
    }
    let (status_code, _) = call("GET", &repair, None);
    assert_eq!(status_code, 405, "GET of a repair");
    let not_owned = (0..PARTITIONS)
        .find(|p| {
            let o = status["map"]["owners"][*p as usize].as_array().unwrap();
            !o.iter().any(|o| *o == *victim)
        })
        .expect("a partition the victim does not own");
    let (status_code, body) = call(
        "GET",
        &format!("{victim_url}/_cluster/held/html/{not_owned}?domain={D}&title=X"),
        None,
    );
    assert_eq!(status_code, 503, "held of a partition not owned: {body}");
    let (status_code, body) = call(
        "POST",
        &format!("{victim_url}/_cluster/repair/html/{not_owned}"),
        Some(&change(Kind::Put, "X").encode()),
    );
    assert_eq!(status_code, 503, "repair of a partition not owned: {body}");
    let (status_code, body) = call(
        "GET",
        &format!("{victim_url}/_cluster/held/html/{part}?domain={D}"),
        None,
    );
    assert_eq!(status_code, 400, "held without a title: {body}");
    let (code, out, err) = run("verify", &cluster.router, &["--check"]);
    assert_eq!(
        code, 0,
        "verify --check after the refused requests: {out} {err}"
    );
}
