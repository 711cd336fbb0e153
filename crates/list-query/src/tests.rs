//! The shared parser under both meanings of an empty value, with and without a format's own
//! parameters, and the exact error of every refusal.

use error_codes::{ApiError, ErrorCode};

use crate::{Empty, ListOrder, Page, Rules, invalid, no_extra, pairs, parse};

const ABSENT: Rules = Rules::contract(Empty::Absent);
const VALUE: Rules = Rules::contract(Empty::Value);

/// `Ok((limit, after, order))`, or `Err(detail)`; the detail begins with the parameter it
/// names.
type Expected = Result<(usize, Option<&'static str>, ListOrder), &'static str>;

fn check(rules: &Rules, query: &str, expected: Expected) {
    let got = parse(Some(query), rules, no_extra);
    match (got, expected) {
        (Ok(p), Ok(want)) => {
            assert_eq!((p.limit, p.after.as_deref(), p.order), want, "{query:?}");
        }
        (Err(e), Err(detail)) => {
            let param = detail.split(' ').next();
            assert_eq!(e.code, ErrorCode::InvalidRequest, "{query:?}");
            assert_eq!(e.status(), 400, "{query:?}");
            assert_eq!(e.message(), "invalid request", "{query:?}");
            assert_eq!(e.param.as_deref(), param, "{query:?}");
            assert_eq!(e.detail, detail, "{query:?}");
        }
        (got, _) => panic!("{query:?} under {:?}: {got:?}", rules.empty),
    }
}

const LIMIT_0: &str = "limit must be an integer from 1 to 100, got \"0\"";
const LIMIT_EMPTY: &str = "limit must be an integer from 1 to 100, got \"\"";

#[test]
fn paging_parameters_under_both_meanings_of_empty() {
    use ListOrder::{Asc, Desc};
    // The same answer whatever an empty value means.
    let both: [(&str, Expected); 20] = [
        ("", Ok((20, None, Desc))),
        ("limit=5&after=x_1&order=asc", Ok((5, Some("x_1"), Asc))),
        ("limit=1", Ok((1, None, Desc))),
        ("limit=100&order=desc", Ok((100, None, Desc))),
        ("after=x%5F1", Ok((20, Some("x_1"), Desc))),
        ("after=a+b%20c", Ok((20, Some("a b c"), Desc))),
        ("after=100%", Ok((20, Some("100%"), Desc))),
        ("after=%zz%4", Ok((20, Some("%zz%4"), Desc))),
        ("after=", Ok((20, None, Desc))),
        ("unknown=1&&limit=3", Ok((3, None, Desc))),
        ("%6Cimit=7", Ok((7, None, Desc))),
        ("limit=3&limit=4", Ok((4, None, Desc))),
        ("%FF=1", Ok((20, None, Desc))),
        ("limit=0", Err(LIMIT_0)),
        ("limit=0&limit=5", Err(LIMIT_0)),
        (
            "limit=101",
            Err("limit must be an integer from 1 to 100, got \"101\""),
        ),
        (
            "limit=-1",
            Err("limit must be an integer from 1 to 100, got \"-1\""),
        ),
        (
            "limit=abc",
            Err("limit must be an integer from 1 to 100, got \"abc\""),
        ),
        ("order=ASC", Err("order must be asc or desc, got \"ASC\"")),
        ("after=%FF", Err("after must be percent-encoded UTF-8")),
    ];
    for (query, expected) in both {
        check(&ABSENT, query, expected);
        check(&VALUE, query, expected);
    }
    // A value that does not decode is refused for any parameter, even one nobody reads.
    check(
        &ABSENT,
        "foo=%C3%28",
        Err("foo must be percent-encoded UTF-8"),
    );
}

#[test]
fn an_empty_value_is_absent_or_a_value() {
    use ListOrder::{Asc, Desc};
    let cases: [(&str, Expected, Expected); 5] = [
        ("limit=", Ok((20, None, Desc)), Err(LIMIT_EMPTY)),
        ("limit", Ok((20, None, Desc)), Err(LIMIT_EMPTY)),
        ("limit=7&limit=", Ok((7, None, Desc)), Err(LIMIT_EMPTY)),
        (
            "order=asc&order=",
            Ok((20, None, Asc)),
            Err("order must be asc or desc, got \"\""),
        ),
        // Absent keeps the earlier cursor; a value clears it.
        (
            "after=x&after=",
            Ok((20, Some("x"), Desc)),
            Ok((20, None, Desc)),
        ),
    ];
    for (query, absent, value) in cases {
        check(&ABSENT, query, absent);
        check(&VALUE, query, value);
    }
}

#[test]
fn a_format_sets_its_own_bounds() {
    assert_eq!(
        Rules::contract(Empty::Value),
        Rules {
            default_limit: 20,
            max_limit: 100,
            empty: Empty::Value,
        }
    );
    let rules = Rules {
        default_limit: 7,
        max_limit: 50,
        empty: Empty::Absent,
    };
    assert_eq!(
        parse(None, &rules, no_extra).unwrap(),
        Page {
            limit: 7,
            after: None,
            order: ListOrder::Desc
        }
    );
    assert_eq!(parse(None, &rules, no_extra), Ok(rules.first_page()));
    check(&rules, "limit=50", Ok((50, None, ListOrder::Desc)));
    check(
        &rules,
        "limit=51",
        Err("limit must be an integer from 1 to 50, got \"51\""),
    );
}

#[test]
fn a_format_reads_its_own_parameters() {
    let run = |rules: &Rules, query: &str| {
        let mut seen = Vec::new();
        let got = parse(Some(query), rules, |name, value| {
            if name == "status" && value == "bad" {
                return Err(invalid("status", "status must be good", &value));
            }
            seen.push(format!("{name}={value}"));
            Ok(())
        });
        (got, seen)
    };
    // Decoded, in order, the paging parameters kept for the parser.
    let (got, seen) = run(&ABSENT, "st%61tus=a+b&limit=3&x&status=c&after=z");
    assert_eq!(got.unwrap().limit, 3);
    assert_eq!(seen, ["status=a b", "status=c"]);
    // An empty value reaches the format only when it is a value.
    let (_, seen) = run(&VALUE, "status=&x");
    assert_eq!(seen, ["status=", "x="]);
    // The format's refusal is the answer, and stops the parse.
    let (got, seen) = run(&ABSENT, "status=1&status=bad&limit=0");
    let e = got.unwrap_err();
    assert_eq!(
        (e.param.as_deref(), e.detail.as_str()),
        (Some("status"), "status must be good, got \"bad\"")
    );
    assert_eq!(seen, ["status=1"]);
}

#[test]
fn invalid_quotes_and_cuts_the_value() {
    let long = "é".repeat(70);
    let e: ApiError = invalid("variant", "variant must be video or thumbnail", &long);
    assert_eq!(e.code, ErrorCode::InvalidRequest);
    assert_eq!(e.param.as_deref(), Some("variant"));
    assert_eq!(
        e.detail,
        format!(
            "variant must be video or thumbnail, got \"{}\"",
            "é".repeat(60)
        )
    );
    let e = invalid("after", String::from("after is odd"), "a\"b\\c\n");
    assert_eq!(e.detail, r#"after is odd, got "a\"b\\c\n""#);
}

#[test]
fn pairs_decode_names_and_values() {
    let got: Vec<_> = pairs(Some("a=1&&b&%63=%2B+&%FF=x&d=%E2%82%AC"))
        .map(Result::unwrap)
        .collect();
    let want = [("a", "1"), ("b", ""), ("c", "+ "), ("d", "€")];
    assert_eq!(got.len(), want.len());
    for ((name, value), (n, v)) in got.iter().zip(want) {
        assert_eq!((name.as_str(), value.as_str()), (n, v));
    }
    assert_eq!(pairs(None).count(), 0);
    assert_eq!(pairs(Some("")).count(), 0);
}
