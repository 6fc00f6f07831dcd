//! Tests of the routes' parsing and answers.
use super::*;
use proptest::prelude::*;

/// The API's router on a data root with no bucket, and the root (kept while it is used).
fn router_on_empty_root() -> (Router, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let registry = Arc::new(Registry::open(dir.path(), None, 4).unwrap());
    let app = Arc::new(App {
        registry: registry.clone(),
        writes: Arc::new(wink_service::LocalWrites::new(registry)),
        metrics: Arc::new(Metrics::default()),
        auth: Auth::none(),
        limits: BodyLimits::new(1 << 20, 1 << 20, std::time::Duration::from_secs(5)),
        cursors: super::super::cursor::CursorKey::load_or_create(dir.path()).unwrap(),
        gate: Arc::new(wink_service::LocalGate),
        extension: None,
    });
    (router(app), dir)
}

/// The router's answer to `method path`.
fn answer(router: &Router, method: &str, path: &str) -> Response<Body> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let req = Request::builder()
        .method(method)
        .uri(path)
        .body(Body::empty())
        .unwrap();
    rt.block_on(router.clone().oneshot(req)).unwrap()
}

/// The router's answer to `method path`: its status and its problem, if it is one.
fn ask(router: &Router, method: &str, path: &str) -> (u16, Option<Problem>) {
    let mut a = answer(router, method, path);
    (a.status().as_u16(), a.extensions_mut().remove::<Problem>())
}

const P: &str = "/en.wikipedia.org/sys/key_rev_value/html";

#[test]
fn segments_are_decoded_one_by_one() {
    let k = Key::decode(p!("/{title}"), &format!("{P}/AC%2FDC%20%C3%BC"))
        .ok()
        .unwrap();
    assert_eq!(
        (k.place.domain.as_str(), k.place.bucket.as_str()),
        ("en.wikipedia.org", "html")
    );
    assert_eq!(k.title.as_deref(), Some("AC/DC ü"));
    assert_eq!((k.rev, k.tid), (None, None));
    let tid = key::tid_at(1_700_000_000, 1, [1; 6]);
    let k = Key::decode(p!("/{title}/{rev}/{tid}"), &format!("{P}/T/3/{tid}"))
        .ok()
        .unwrap();
    assert_eq!(
        (k.title.as_deref(), k.rev, k.tid),
        (Some("T"), Some(3), Some(tid))
    );
    let k = Key::decode(p!("/{title}/{rev}/_lift"), &format!("{P}/T/3/_lift"))
        .ok()
        .unwrap();
    assert_eq!(
        (k.title.as_deref(), k.rev, k.tid),
        (Some("T"), Some(3), None)
    );
}

#[test]
fn answers_carry_their_routes_label() {
    let (router, _root) = router_on_empty_root();
    let label = |method: &str, path: &str| {
        answer(&router, method, path)
            .extensions()
            .get::<Route>()
            .copied()
    };
    let tid = key::tid_at(1_700_000_000, 1, [1; 6]);
    let cases = [
        ("GET", P.to_string(), Route::BucketGet),
        ("PUT", P.to_string(), Route::BucketPut),
        ("GET", format!("{P}/"), Route::Titles),
        ("GET", format!("{P}/T"), Route::Latest),
        (
            "GET",
            format!("{P}/T?as_of=2024-01-01T00:00:00Z"),
            Route::AsOf,
        ),
        ("DELETE", format!("{P}/T"), Route::TakeDown),
        ("GET", format!("{P}/T/"), Route::Renders),
        ("GET", format!("{P}/T/3"), Route::Revision),
        ("PUT", format!("{P}/T/3"), Route::Put),
        ("DELETE", format!("{P}/T/3"), Route::TakeDown),
        ("GET", format!("{P}/T/3/{tid}"), Route::Render),
        ("PUT", format!("{P}/T/3/{tid}"), Route::Put),
        ("POST", format!("{P}/T/_lift"), Route::Lift),
        ("POST", format!("{P}/T/3/_lift"), Route::Lift),
        // A 405 is counted with its route, a refused segment too.
        ("PATCH", format!("{P}/T"), Route::Latest),
        ("GET", format!("{P}/T/x"), Route::Revision),
    ];
    for (method, path, route) in cases {
        assert_eq!(label(method, &path), Some(route), "{method} {path}");
    }
    // Outside the API, the front labels by path (not the router).
    assert_eq!(route_of("/_health", &Method::GET, None), Route::Health);
    assert_eq!(route_of("/metrics", &Method::GET, None), Route::Metrics);
    assert_eq!(route_of("/", &Method::GET, None), Route::Other);
}

#[test]
fn routes_take_their_paths_and_refuse_bad_segments() {
    let (router, _root) = router_on_empty_root();
    let status = |path: &str| {
        let (status, problem) = ask(&router, "GET", path);
        assert!(
            status < 400 || problem.is_some(),
            "{path}: {status} is no problem"
        );
        status
    };
    // Paths of routes, about a bucket that does not exist.
    for tail in [
        "",
        "/",
        "/AC%2FDC",
        "/T/",
        "/T/12",
        "/T/3/01e8a0b0-7a6e-11ee-8101-010101010101",
    ] {
        assert_eq!(status(&format!("{P}{tail}")), 404, "{tail}");
    }
    assert_eq!(status("/_health"), 200);
    assert_eq!(status("/metrics"), 200);
    assert_eq!(status("/"), 404);
    assert_eq!(status("/x/sys/other/html"), 404);
    assert_eq!(status("/metrics/"), 404);
    assert_eq!(status(&format!("{P}/T/1/2/3")), 404);
    assert_eq!(status("/en.wikipedia.org/sys/key_rev_value/..%2Fetc"), 400);
    assert_eq!(status("/en.wikipedia.org/sys/key_rev_value/HTML"), 400);
    assert_eq!(
        status("/en.wikipedia.org/sys/key_rev_value/"),
        400,
        "no bucket name"
    );
    assert_eq!(status(&format!("{P}/%FF")), 400, "not UTF-8");
    assert_eq!(status(&format!("{P}/%00")), 400, "NUL");
    assert_eq!(status(&format!("{P}/{}", "t".repeat(1025))), 400);
    assert_eq!(status(&format!("{P}//")), 400, "an empty title");
    assert_eq!(status(&format!("{P}//5")), 400, "an empty title");
    assert_eq!(status(&format!("{P}/T//")), 400, "an empty revision");
    assert_eq!(status(&format!("{P}/T/-1")), 400);
    assert_eq!(status(&format!("{P}/T/1x")), 400);
    assert_eq!(status(&format!("{P}/T/1/not-a-uuid")), 400);
    assert_eq!(
        status(&format!("{P}/T/1/6ba7b810-9dad-41d1-80b4-00c04fd430c8")),
        400
    );
    assert_eq!(
        status("/a%2Fb/sys/key_rev_value/html"),
        400,
        "a domain with '/'"
    );
}

#[test]
fn other_methods_are_405_with_the_routes_methods() {
    let (router, _root) = router_on_empty_root();
    for (path, allow) in [
        (P.to_string(), "GET, HEAD, PUT"),
        (format!("{P}/"), "GET, HEAD"),
        (format!("{P}/T"), "GET, HEAD, DELETE"),
        (format!("{P}/T/"), "GET, HEAD"),
        (format!("{P}/T/1"), "GET, HEAD, PUT, DELETE"),
        (
            format!("{P}/T/1/01e8a0b0-7a6e-11ee-8101-010101010101"),
            "GET, HEAD, PUT",
        ),
        (format!("{P}/T/_lift"), "POST"),
        (format!("{P}/T/1/_lift"), "POST"),
        ("/_health".to_string(), "GET, HEAD"),
        ("/metrics".to_string(), "GET, HEAD"),
    ] {
        let (status, problem) = ask(&router, "PATCH", &path);
        assert_eq!(status, 405, "{path}");
        assert_eq!(
            problem.and_then(|p| p.allow).as_deref(),
            Some(allow),
            "{path}"
        );
    }
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
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Any path a client sends is routed to an answer or refused as a problem (400 or 404),
    /// never a panic, never a plain-text rejection of the router's own.
    #[test]
    fn any_path_is_answered_or_a_client_error(
        tail in proptest::collection::vec(
            prop_oneof![
                proptest::string::string_regex("[A-Za-z0-9._~-]{0,12}").unwrap(),
                proptest::string::string_regex("(%[0-9A-Fa-f]{2}){1,6}").unwrap(),
                proptest::string::string_regex("[%_/]{0,3}").unwrap(),
                proptest::string::string_regex("[A-Za-z0-9%_]{0,8}").unwrap(),
            ],
            0..6,
        ),
        prefix in 0usize..3,
    ) {
        let start = ["/", "/en.wikipedia.org/sys/key_rev_value/", "/d/sys/key_rev_value/b/"];
        let path = format!("{}{}", start[prefix], tail.join("/"));
        // hyper refuses a target that is no URI before any route sees it.
        prop_assume!(path.parse::<hyper::Uri>().is_ok());
        let (router, _root) = router_on_empty_root();
        let (status, problem) = ask(&router, "GET", &path);
        prop_assert!(matches!(status, 200 | 400 | 404), "{path}: {status}");
        prop_assert!(status == 200 || problem.is_some(), "{path}: {status} is no problem");
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
