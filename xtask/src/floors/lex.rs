//! The tokens of a Rust file as far as imports go: identifiers, `::`, punctuation and string
//! literals (for `#[path = "..."]`), each with its line; comments are dropped, and other
//! literals, lifetimes and labels become one opaque token.

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tok {
    Ident(String),
    /// `::`.
    PathSep,
    Punct(char),
    /// A string literal's text between its quotes, escapes left as written.
    Str(String),
    /// A number, a character, a lifetime or a label.
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub tok: Tok,
    pub line: usize,
}

/// The tokens of `text`. Never fails: an unclosed comment or literal ends at the end of text.
pub fn tokens(text: &str) -> Vec<Token> {
    Lexer {
        s: text.chars().collect(),
        i: 0,
        line: 1,
        out: Vec::new(),
    }
    .run()
}

struct Lexer {
    s: Vec<char>,
    i: usize,
    line: usize,
    out: Vec<Token>,
}

fn ident_start(c: char) -> bool {
    c == '_' || c.is_alphabetic()
}

fn ident_char(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

impl Lexer {
    fn at(&self, i: usize) -> Option<char> {
        self.s.get(i).copied()
    }

    fn push(&mut self, tok: Tok, line: usize) {
        self.out.push(Token { tok, line });
    }

    /// Moves past `s[i]`, counting lines.
    fn bump(&mut self) {
        if self.at(self.i) == Some('\n') {
            self.line += 1;
        }
        self.i += 1;
    }

    fn run(mut self) -> Vec<Token> {
        while let Some(c) = self.at(self.i) {
            let next = self.at(self.i + 1);
            let line = self.line;
            match c {
                _ if c.is_whitespace() => self.bump(),
                '/' if next == Some('/') => {
                    while self.at(self.i).is_some_and(|c| c != '\n') {
                        self.i += 1;
                    }
                }
                '/' if next == Some('*') => self.block_comment(),
                '"' => {
                    self.i += 1;
                    let text = self.quoted(0);
                    self.push(Tok::Str(text), line);
                }
                '\'' => self.quote_or_lifetime(),
                ':' if next == Some(':') => {
                    self.i += 2;
                    self.push(Tok::PathSep, line);
                }
                _ if c.is_ascii_digit() => self.number(),
                _ if ident_start(c) => self.word(),
                _ => {
                    self.i += 1;
                    self.push(Tok::Punct(c), line);
                }
            }
        }
        self.out
    }

    /// `/* ... */`, nested.
    fn block_comment(&mut self) {
        self.i += 2;
        let mut depth = 1;
        while depth > 0 && self.i < self.s.len() {
            match (self.at(self.i), self.at(self.i + 1)) {
                (Some('/'), Some('*')) => {
                    depth += 1;
                    self.i += 2;
                }
                (Some('*'), Some('/')) => {
                    depth -= 1;
                    self.i += 2;
                }
                _ => self.bump(),
            }
        }
    }

    /// The rest of a string whose opening quote is behind; `hashes` > 0 for a raw string
    /// (no escapes, closed by `"` and as many `#`).
    fn quoted(&mut self, hashes: usize) -> String {
        let start = self.i;
        loop {
            match self.at(self.i) {
                None => return self.s[start..].iter().collect(),
                Some('\\') if hashes == 0 => {
                    self.bump();
                    self.bump();
                }
                Some('"') if (1..=hashes).all(|k| self.at(self.i + k) == Some('#')) => {
                    let text = self.s[start..self.i].iter().collect();
                    self.i += 1 + hashes;
                    return text;
                }
                Some(_) => self.bump(),
            }
        }
    }

    /// A raw string from its `#`s or opening quote (the `r` behind): `r"..."`, `r#"..."#`.
    fn raw_string(&mut self, line: usize) {
        let mut hashes = 0;
        while self.at(self.i) == Some('#') {
            hashes += 1;
            self.i += 1;
        }
        self.i += 1; // the opening quote
        let text = self.quoted(hashes);
        self.push(Tok::Str(text), line);
    }

    /// `'x'`, `'\n'`, `'\u{..}'`, or a lifetime or label `'a`.
    fn quote_or_lifetime(&mut self) {
        let line = self.line;
        let (c1, c2) = (self.at(self.i + 1), self.at(self.i + 2));
        if c1 == Some('\\') {
            self.i += 3;
            while self.at(self.i).is_some_and(|c| c != '\'' && c != '\n') {
                self.i += 1;
            }
            self.i += 1;
        } else if c2 == Some('\'') {
            self.i += 3;
        } else {
            self.i += 1;
            while self.at(self.i).is_some_and(ident_char) {
                self.i += 1;
            }
        }
        self.push(Tok::Other, line);
    }

    fn number(&mut self) {
        let line = self.line;
        while self.at(self.i).is_some_and(ident_char)
            || (self.at(self.i) == Some('.')
                && self.at(self.i + 1).is_some_and(|c| c.is_ascii_digit()))
        {
            self.i += 1;
        }
        self.push(Tok::Other, line);
    }

    /// An identifier or keyword, or a literal with a prefix: `r"..."`, `b"..."`, `br#"..."#`,
    /// `c"..."`, `b'x'`, or a raw identifier `r#name`.
    fn word(&mut self) {
        let line = self.line;
        let start = self.i;
        while self.at(self.i).is_some_and(ident_char) {
            self.i += 1;
        }
        let word: String = self.s[start..self.i].iter().collect();
        let next = self.at(self.i);
        let raw_next = || {
            let mut k = self.i;
            while self.at(k) == Some('#') {
                k += 1;
            }
            self.at(k) == Some('"')
        };
        match word.as_str() {
            "r" | "br" | "cr" if raw_next() => self.raw_string(line),
            "b" | "c" if next == Some('"') => {
                self.i += 1;
                let text = self.quoted(0);
                self.push(Tok::Str(text), line);
            }
            "b" if next == Some('\'') => self.quote_or_lifetime(),
            "r" if next == Some('#') && self.at(self.i + 1).is_some_and(ident_start) => {
                self.i += 1;
                let start = self.i;
                while self.at(self.i).is_some_and(ident_char) {
                    self.i += 1;
                }
                let name = self.s[start..self.i].iter().collect();
                self.push(Tok::Ident(name), line);
            }
            _ => self.push(Tok::Ident(word), line),
        }
    }
}
