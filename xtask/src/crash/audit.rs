//! The invariants over the facts: every acknowledged task exists and is final, each task's
//! ledger entries are what its final status implies, one charge per message, and the balance
//! is the quota plus the entries, entry by entry.

use std::collections::BTreeMap;

use super::facts::{FINAL_DEADLINE, Facts, Found};

#[derive(Debug, Default)]
pub struct Audit {
    pub violations: Vec<String>,
    pub charges: usize,
}

/// The invariants, over what the APIs showed: every acknowledged task exists and is final;
/// each task's entries are what its final status implies and no entry names an unknown task;
/// one charge per message; the balance is the quota plus the entries, entry by entry.
pub fn audit(facts: &Facts) -> Audit {
    let mut out = Audit::default();
    let violations = &mut out.violations;
    let unfinished: Vec<&String> = facts
        .tasks
        .iter()
        .filter(|(_, f)| matches!(f, Found::Unfinished(_)))
        .map(|(id, _)| id)
        .collect();
    if !unfinished.is_empty() {
        violations.push(format!(
            "{} tasks not final after {FINAL_DEADLINE:?}, e.g. {:?}",
            unfinished.len(),
            &unfinished[..unfinished.len().min(5)]
        ));
    }

    // The ledger, entry by entry.
    let mut by_task: BTreeMap<&str, Vec<(&str, i64)>> = BTreeMap::new();
    let mut running = facts.quota;
    let mut sum = 0i64;
    for (n, e) in facts.entries.iter().enumerate() {
        let (Some(task), Some(kind), Some(amount)) = (
            e["task_id"].as_str(),
            e["kind"].as_str(),
            e["amount"].as_i64(),
        ) else {
            violations.push(format!("ledger entry {n} is malformed: {e}"));
            continue;
        };
        sum += amount;
        running += amount;
        if e["balance_after"].as_i64() != Some(running) {
            violations.push(format!(
                "ledger entry {n} ({task} {kind} {amount}): balance_after {} but the quota and the entries up to it make {running}",
                e["balance_after"]
            ));
            // Go on from what the relay says, so one fault is reported once.
            running = e["balance_after"].as_i64().unwrap_or(running);
        }
        by_task.entry(task).or_default().push((kind, amount));
    }
    for (id, list) in &by_task {
        if id.starts_with("msg_") {
            out.charges += list.len();
            if list.len() != 1 || list[0].0 != "charge" {
                violations.push(format!(
                    "message {id}: entries {list:?}, expected one charge"
                ));
            }
            if list.iter().any(|(_, a)| *a > 0) {
                violations.push(format!("message {id}: a charge gives credits: {list:?}"));
            }
        }
    }

    for (id, found) in &facts.tasks {
        let acked = facts.acked.contains(id);
        let status = match found {
            Found::Final(s) => s.as_str(),
            Found::Unfinished(_) => continue,
            Found::Lost if acked => {
                violations.push(format!("acknowledged task {id} was lost (404)"));
                continue;
            }
            Found::Lost => {
                violations.push(format!(
                    "ledger entries or /admin/tasks name {id}, which is not found"
                ));
                continue;
            }
            Found::Foreign => {
                violations.push(format!("{id} is named as a task but is of neither format"));
                continue;
            }
        };
        if let Some(listed) = facts.listed.get(id) {
            if listed != status {
                violations.push(format!(
                    "task {id}: /admin/tasks says {listed}, its own path says {status}"
                ));
            }
        } else {
            violations.push(format!("task {id} ({status}) is missing from /admin/tasks"));
        }
        let list = by_task.get(id.as_str()).cloned().unwrap_or_default();
        let count = |k: &str| list.iter().filter(|(kind, _)| *kind == k).count();
        let amount = |k: &str| list.iter().find(|(kind, _)| *kind == k).map(|e| e.1);
        let expected = match status {
            "completed" | "succeeded" => (1, 1, 0),
            _ => (1, 0, 1),
        };
        let counts = (count("prededuct"), count("settle"), count("refund"));
        if counts != expected || list.len() != 2 {
            violations.push(format!(
                "task {id} is {status}: entries {list:?}, expected a prededuct and a {}",
                if expected.1 == 1 { "settle" } else { "refund" }
            ));
            continue;
        }
        let price = -amount("prededuct").unwrap_or(0);
        if price <= 0 {
            violations.push(format!(
                "task {id}: a pre-deduction that takes nothing: {list:?}"
            ));
        }
        if let Some(refund) = amount("refund")
            && refund != price
        {
            violations.push(format!(
                "task {id} is {status}: refund {refund} of a pre-deduction of {price}"
            ));
        }
        if let Some(settle) = amount("settle")
            && !(0..=price).contains(&settle)
        {
            violations.push(format!(
                "task {id} is {status}: settle {settle} of a pre-deduction of {price}"
            ));
        }
    }

    if facts.remaining != Some(facts.quota + sum) {
        violations.push(format!(
            "quota_remaining {:?} but the starting quota {} plus the ledger's {} entries is {}",
            facts.remaining,
            facts.quota,
            facts.entries.len(),
            facts.quota + sum
        ));
    }
    if let Some(last) = facts.entries.last()
        && last["balance_after"].as_i64() != facts.remaining
    {
        violations.push(format!(
            "quota_remaining {:?} but the last ledger entry's balance_after is {}",
            facts.remaining, last["balance_after"]
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// Ledger entries with correct running balances from `quota`.
    fn ledger(quota: i64, moves: &[(&str, &str, i64)]) -> Vec<Value> {
        let mut balance = quota;
        moves
            .iter()
            .map(|(task, kind, amount)| {
                balance += amount;
                json!({"task_id": task, "kind": kind, "amount": amount, "balance_after": balance})
            })
            .collect()
    }

    /// A run that went right: a completed video, a failed generation, a message, and a task
    /// stored but never acknowledged (cancelled).
    fn good() -> Facts {
        let entries = ledger(
            1000,
            &[
                ("video_1", "prededuct", -50),
                ("gen_2", "prededuct", -20),
                ("msg_3", "charge", -1),
                ("video_1", "settle", 0),
                ("video_4", "prededuct", -60),
                ("gen_2", "refund", 20),
                ("video_4", "refund", 60),
            ],
        );
        let task = |s: &str| Found::Final(s.to_owned());
        Facts {
            quota: 1000,
            acked: ["video_1", "gen_2"].map(String::from).into(),
            tasks: [
                ("video_1".to_owned(), task("completed")),
                ("gen_2".to_owned(), task("failed")),
                ("video_4".to_owned(), task("cancelled")),
            ]
            .into(),
            listed: [
                ("video_1", "completed"),
                ("gen_2", "failed"),
                ("video_4", "cancelled"),
            ]
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
            .into(),
            remaining: Some(1000 - 51),
            entries,
        }
    }

    fn violations(facts: &Facts) -> String {
        audit(facts).violations.join("\n")
    }

    #[test]
    fn a_run_that_went_right_passes() {
        let audit = audit(&good());
        assert!(audit.violations.is_empty(), "{:?}", audit.violations);
        assert_eq!(audit.charges, 1);
    }

    #[test]
    fn each_broken_invariant_is_named() {
        let mut f = good();
        f.tasks.insert("video_1".into(), Found::Lost);
        assert!(violations(&f).contains("acknowledged task video_1 was lost"));

        let mut f = good();
        f.tasks
            .insert("gen_2".into(), Found::Unfinished("running".into()));
        assert!(violations(&f).contains("not final"), "{}", violations(&f));

        // A double refund: the balance follows it, the task's entries do not fit.
        let mut f = good();
        f.entries = ledger(
            1000,
            &[
                ("video_1", "prededuct", -50),
                ("video_1", "settle", 0),
                ("gen_2", "prededuct", -20),
                ("gen_2", "refund", 20),
                ("gen_2", "refund", 20),
                ("msg_3", "charge", -1),
                ("video_4", "prededuct", -60),
                ("video_4", "refund", 60),
            ],
        );
        f.remaining = Some(1000 - 31);
        let v = violations(&f);
        assert!(v.contains("task gen_2 is failed"), "{v}");

        // A settle where the status says refund.
        let mut f = good();
        f.tasks
            .insert("video_4".into(), Found::Final("completed".into()));
        f.listed.insert("video_4".into(), "completed".into());
        assert!(violations(&f).contains("expected a prededuct and a settle"));

        // An entry of a task that is not there.
        let mut f = good();
        f.tasks.insert("video_4".into(), Found::Lost);
        assert!(violations(&f).contains("video_4, which is not found"));

        // Two charges of one message.
        let mut f = good();
        let mut moves = vec![("msg_3", "charge", -1)];
        moves.extend([
            ("video_1", "prededuct", -50),
            ("video_1", "settle", 0),
            ("gen_2", "prededuct", -20),
            ("gen_2", "refund", 20),
            ("msg_3", "charge", -1),
            ("video_4", "prededuct", -60),
            ("video_4", "refund", 60),
        ]);
        f.entries = ledger(1000, &moves);
        f.remaining = Some(1000 - 52);
        assert!(violations(&f).contains("message msg_3"));

        // The key's balance off the ledger, and one entry's balance_after off its sum.
        let mut f = good();
        f.remaining = Some(1000);
        assert!(violations(&f).contains("quota_remaining"));
        let mut f = good();
        f.entries[2]["balance_after"] = json!(5);
        assert!(violations(&f).contains("ledger entry 2"));

        // The admin list disagrees or lacks a task.
        let mut f = good();
        f.listed.insert("gen_2".into(), "cancelled".into());
        assert!(violations(&f).contains("/admin/tasks says cancelled"));
        let mut f = good();
        f.listed.remove("video_4");
        assert!(violations(&f).contains("missing from /admin/tasks"));
    }
}
