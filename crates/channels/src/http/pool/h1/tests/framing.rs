//! Where an answer's head and body end, read from memory ([`read_answer`]) in pieces of every
//! size that matters: whole, byte by byte, and a few in between. The outcome must not depend
//! on the pieces, nor take a line end, a coding list or a connection token otherwise than
//! RFC 9112 and the reader in the same place (hyper, httparse) would.

use crate::http::pool::h1::fuzzing::{Answer, AnswerFraming, read_answer};

/// Reads `answer` (to a `GET`) in pieces of several sizes, checks they agree, and gives the
/// outcome.
fn read(answer: &[u8]) -> Result<Answer, String> {
    let whole = read_answer(answer, false, &[]);
    for sizes in [&[1usize][..], &[2], &[3, 1, 7], &[4096], &[65_536, 1]] {
        assert_eq!(
            read_answer(answer, false, sizes),
            whole,
            "{:?} in pieces of {sizes:?}",
            String::from_utf8_lossy(&answer[..answer.len().min(200)])
        );
    }
    whole
}

/// `answer`'s body and framing when it is taken whole, or the body's error.
fn body(answer: &str) -> (AnswerFraming, Result<String, String>) {
    let a = read(answer.as_bytes()).unwrap_or_else(|e| panic!("{answer:?}: head refused: {e}"));
    let text = String::from_utf8_lossy(&a.body).into_owned();
    (a.framing, a.end.map(|_| text))
}

#[test]
fn chunk_lines_end_in_crlf_and_hold_no_control_bytes() {
    let head = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";
    // (chunks, the body or the error's words)
    let cases: [(&str, Result<&str, &str>); 10] = [
        ("5\r\nhello\r\n0\r\n\r\n", Ok("hello")),
        ("5 \t;name=\"v\" ;x\r\nhello\r\n0\r\n\r\n", Ok("hello")),
        (
            "5\r\nhello\r\n0\r\nx-sum: 1\r\nx-more: 2\r\n\r\n",
            Ok("hello"),
        ),
        ("5\r\nhello\n0\r\n\r\n", Err("ended by a bare LF")),
        (
            "5\nhello\r\n0\r\n\r\n",
            Err("chunk-size line ended by a bare LF"),
        ),
        (
            "5;a\nb\r\nhello\r\n0\r\n\r\n",
            Err("chunk-size line ended by a bare LF"),
        ),
        ("5;a\rb\r\nhello\r\n0\r\n\r\n", Err("control byte")),
        ("5\r\r\nhello\r\n0\r\n\r\n", Err("control byte")),
        ("5 5\r\nhello\r\n0\r\n\r\n", Err("invalid chunk size")),
        (
            "5\r\nhello\r\n0\r\nx y\r\n\r\n",
            Err("invalid trailer fields"),
        ),
    ];
    for (chunks, expected) in cases {
        let (framing, got) = body(&format!("{head}{chunks}"));
        assert_eq!(framing, AnswerFraming::Chunked, "{chunks:?}");
        match (got, expected) {
            (Ok(got), Ok(want)) => assert_eq!(got, want, "{chunks:?}"),
            (Err(e), Err(want)) => assert!(e.contains(want), "{chunks:?}: {e}"),
            (got, want) => panic!("{chunks:?}: {got:?}, expected {want:?}"),
        }
    }
}

#[test]
fn a_long_chunk_line_or_head_is_refused_however_it_arrives() {
    let head = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";
    let long_line = format!("{head}5;{}\r\nhello\r\n0\r\n\r\n", "x".repeat(5000));
    let (_, got) = body(&long_line);
    assert!(got.unwrap_err().contains("chunk-size line too long"));
    let trailers: String = (0..40)
        .map(|i| format!("x-{i}: {}\r\n", "t".repeat(500)))
        .collect();
    let long_trailers = format!("{head}0\r\n{trailers}\r\n");
    let (_, got) = body(&long_trailers);
    assert!(got.unwrap_err().contains("trailers too long"));
    let big_head = format!(
        "HTTP/1.1 200 OK\r\nx-big: {}\r\ncontent-length: 2\r\n\r\nok",
        "a".repeat(70 * 1024)
    );
    let err = read(big_head.as_bytes()).unwrap_err();
    assert!(err.contains("head larger than"), "{err}");
}

#[test]
fn transfer_codings_are_a_list_whose_empty_elements_do_not_count() {
    // (the codings' fields, the framing)
    let cases = [
        ("transfer-encoding: chunked", AnswerFraming::Chunked),
        ("transfer-encoding: chunked, ", AnswerFraming::Chunked),
        (
            "transfer-encoding: gzip ,chunked ,,",
            AnswerFraming::Chunked,
        ),
        (
            "transfer-encoding: chunked\r\ntransfer-encoding: ",
            AnswerFraming::Chunked,
        ),
        ("transfer-encoding: chunked, gzip", AnswerFraming::Close),
        (
            "transfer-encoding: chunked\r\ntransfer-encoding: gzip",
            AnswerFraming::Close,
        ),
    ];
    for (fields, framing) in cases {
        let answer = format!("HTTP/1.1 200 OK\r\n{fields}\r\n\r\n2\r\nok\r\n0\r\n\r\n");
        let a = read(answer.as_bytes()).unwrap();
        assert_eq!(a.framing, framing, "{fields:?}");
        if framing == AnswerFraming::Chunked {
            assert_eq!(a.body, b"ok", "{fields:?}");
        }
    }
}

#[test]
fn close_wins_over_keep_alive_in_any_order() {
    // (version, connection tokens, kept)
    let cases = [
        ("1.1", "x-none: 0", true),
        ("1.1", "connection: close", false),
        ("1.0", "x-none: 0", false),
        ("1.0", "connection: keep-alive", true),
        ("1.0", "connection: close, keep-alive", false),
        ("1.0", "connection: keep-alive\r\nconnection: close", false),
        ("1.1", "connection: keep-alive, close", false),
    ];
    for (version, fields, kept) in cases {
        let answer = format!("HTTP/{version} 200 OK\r\n{fields}\r\ncontent-length: 2\r\n\r\nok");
        let a = read(answer.as_bytes()).unwrap();
        assert_eq!(a.keep_alive, kept, "HTTP/{version} {fields:?}");
        assert_eq!(a.end, Ok(answer.len()));
    }
}

#[test]
fn informational_answers_are_passed_over_to_the_final_head() {
    let answer = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n\
                  HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\nokNEXT";
    let a = read(answer.as_bytes()).unwrap();
    assert_eq!(a.status, 201);
    assert_eq!(a.head_end, answer.find("ok").unwrap());
    assert_eq!(a.body, b"ok");
    assert_eq!(a.end, Ok(answer.len() - "NEXT".len()));
    // A head taken from a `HEAD` has no body, whatever it announces.
    let head = read_answer(answer.as_bytes(), true, &[]).unwrap();
    assert_eq!(
        (head.framing, head.end),
        (AnswerFraming::Empty, Ok(a.head_end))
    );
}
