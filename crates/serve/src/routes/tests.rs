//! Tests of the routes' parsing and answers.
use super::*;
use proptest::prelude::*;

fn target(path: &str) -> Result<Target> {
    parse_path(path)
}

#[test]
fn paths_parse_into_targets() {
    let p = "/en.wikipedia.org/sys/key_rev_value/html";
    assert!(matches!(target(p), Ok(Target::Bucket(_))));
    assert!(matches!(target(&format!("{p}/")), Ok(Target::Titles(_))));
    match target(&format!("{p}/AC%2FDC%20%C3%BC")) {
        Ok(Target::Title(_, t)) => assert_eq!(t, "AC/DC ü"),
        _ => panic!("a title"),
    }
    assert!(matches!(
        target(&format!("{p}/T/")),
        Ok(Target::Renders(..))
    ));
    assert!(matches!(
        target(&format!("{p}/T/12")),
        Ok(Target::Revision(_, _, 12))
    ));
    assert!(matches!(
        target(&format!("{p}/T/_lift")),
        Ok(Target::Lift(_, _, None))
    ));
    assert!(matches!(
        target(&format!("{p}/T/3/_lift")),
        Ok(Target::Lift(_, _, Some(3)))
    ));
    let tid = key::tid_at(1_700_000_000, 1, [1; 6]);
    assert!(matches!(
        target(&format!("{p}/T/3/{tid}")),
        Ok(Target::Render(..))
    ));
    assert!(matches!(target("/_health"), Ok(Target::Health)));
    assert!(matches!(target("/metrics"), Ok(Target::Metrics)));
}

#[test]
fn bad_paths_are_400_or_404() {
    let p = "/en.wikipedia.org/sys/key_rev_value/html";
    let status = |path: &str| match target(path) {
        Err(e) => e.status.as_u16(),
        Ok(_) => 200,
    };
    assert_eq!(status("/"), 404);
    assert_eq!(status("/x/sys/other/html"), 404);
    assert_eq!(status(&format!("{p}/T/1/2/3")), 404);
    assert_eq!(status("/en.wikipedia.org/sys/key_rev_value/..%2Fetc"), 400);
    assert_eq!(status("/en.wikipedia.org/sys/key_rev_value/HTML"), 400);
    assert_eq!(status(&format!("{p}/%FF")), 400, "not UTF-8");
    assert_eq!(status(&format!("{p}/%00")), 400, "NUL");
    assert_eq!(status(&format!("{p}/{}", "t".repeat(1025))), 400);
    assert_eq!(status(&format!("{p}/T/-1")), 400);
    assert_eq!(status(&format!("{p}/T/1x")), 400);
    assert_eq!(status(&format!("{p}/T/1/not-a-uuid")), 400);
    assert_eq!(
        status(&format!("{p}/T/1/6ba7b810-9dad-41d1-80b4-00c04fd430c8")),
        400
    );
    assert_eq!(
        status("/a%2Fb/sys/key_rev_value/html"),
        400,
        "a domain with '/'"
    );
}

#[test]
fn if_none_match_is_weak_and_if_match_strong() {
    let tag = etag(5, key::tid_at(1_700_000_000, 1, [1; 6]));
    let none = |h: &HeaderMap| tag_listed(h, IF_NONE_MATCH, &tag, true);
    let only = |h: &HeaderMap| tag_listed(h, IF_MATCH, &tag, false);
    let mut h = HeaderMap::new();
    assert!(!none(&h));
    h.insert(IF_NONE_MATCH, HeaderValue::from_static("\"4/x\""));
    assert!(!none(&h));
    let list = format!("\"4/x\", W/{}", tag.to_str().unwrap());
    h.insert(IF_NONE_MATCH, HeaderValue::from_str(&list).unwrap());
    assert!(none(&h));
    h.insert(IF_NONE_MATCH, HeaderValue::from_static("*"));
    assert!(none(&h));
    h.insert(IF_MATCH, HeaderValue::from_str(&list).unwrap());
    assert!(!only(&h), "a weak tag never matches strongly");
    h.insert(IF_MATCH, tag.clone());
    assert!(only(&h));
}
proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Any path a client sends parses into a target or a 400/404, never a panic.
    #[test]
    fn any_path_is_a_target_or_a_client_error(
        tail in proptest::collection::vec(
            prop_oneof![
                proptest::string::string_regex("[A-Za-z0-9._~-]{0,12}").unwrap(),
                proptest::string::string_regex("(%[0-9A-Fa-f]{2}){1,6}").unwrap(),
                proptest::string::string_regex("[%_/]{0,3}").unwrap(),
                proptest::string::string_regex(".{0,8}").unwrap(),
            ],
            0..6,
        ),
        prefix in 0usize..3,
    ) {
        let start = ["/", "/en.wikipedia.org/sys/key_rev_value/", "/d/sys/key_rev_value/b/"];
        let path = format!("{}{}", start[prefix], tail.join("/"));
        if let Err(p) = parse_path(&path) {
            prop_assert!(matches!(p.status.as_u16(), 400 | 404), "{}", p.status);
        }
    }

    /// Any query value given as a limit or a cursor is a value or a 400.
    #[test]
    fn any_limit_or_cursor_is_a_value_or_a_400(text in ".{0,40}") {
        let limited = limit(Some(&text));
        prop_assert!(limited.map_or_else(|p| p.status == 400, |n| (1..=MAX_LIMIT).contains(&n)));
        let _ = text.parse::<TitlePosition>();
        let _ = text.parse::<RenderCursor>();
        let _ = wink_engine::clock::parse_instant(&text);
    }
}
