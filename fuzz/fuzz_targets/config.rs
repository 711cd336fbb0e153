//! Config loading (`crates/server` config.rs) over arbitrary TOML text: never a panic; every
//! error names the file, and a rule broken after parsing names its key (`server.listen: ...`,
//! `models.<name>: ...`, `channels...`); a file that loads, written out again by the TOML
//! crate, loads to the same configuration.
#![no_main]

use libfuzzer_sys::fuzz_target;
use server::config::{Config, ConfigError};

const KEYS: [&str; 6] = [
    "server.",
    "tasks.",
    "simulator.",
    "limits.",
    "models.",
    "channels",
];

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Config::from_toml(Some(text), "fuzz.toml") {
        Err(e) => {
            assert!(e.to_string().starts_with("config fuzz.toml: "), "{e}");
            if let ConfigError::Invalid { message, .. } = &e {
                assert!(KEYS.iter().any(|k| message.starts_with(k)), "{message}");
            }
        }
        Ok(config) => {
            let table: toml::Table = toml::from_str(text).expect("it loaded, so it parses");
            let again = toml::to_string(&table).expect("a parsed table writes out");
            match Config::from_toml(Some(&again), "again.toml") {
                Ok(reloaded) => assert_eq!(
                    format!("{reloaded:?}"),
                    format!("{config:?}"),
                    "{text:?} written out as {again:?}"
                ),
                Err(e) => panic!("{text:?} written out as {again:?} does not load: {e}"),
            }
        }
    }
});
