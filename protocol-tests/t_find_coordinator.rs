//! FindCoordinator v0-6: group keys (v4+ batched `coordinator_keys`) and the
//! transaction key type, which tern (no transactions) answers COORDINATOR_NOT_AVAILABLE.

use kafka_protocol::messages::ApiKey;

use crate::groups::*;
use crate::ops::*;

#[test]
fn find_coordinator_group_every_version() {
    let ctx = group_ctx(&[]);
    let mut c = ctx.client();
    let g1 = unique_group("fc1");
    let g2 = unique_group("fc2");
    let g3 = unique_group("fc3");
    wait_coordinator(&ctx, &mut c, &g1);
    let mv = ctx.max_version(ApiKey::Metadata);
    let md = metadata(&mut c, mv, Some(&[]), false);
    let mut fails: Vec<String> = Vec::new();
    for v in ctx.versions_req(ApiKey::FindCoordinator, 0, 6) {
        let keys: Vec<&str> = if v >= 4 {
            vec![g1.as_str(), g2.as_str(), g3.as_str()]
        } else {
            vec![g1.as_str()]
        };
        let res = find_coordinators(&mut c, v, KEY_GROUP, &keys);
        if res.len() != keys.len() {
            fails.push(format!(
                "FindCoordinator v{v}: {} keys asked, {} coordinators answered: {res:?}",
                keys.len(),
                res.len()
            ));
            continue;
        }
        for k in &keys {
            let Some(co) = res.iter().find(|co| co.key == *k) else {
                fails.push(format!(
                    "FindCoordinator v{v}: no answer for key {k}: {res:?}"
                ));
                continue;
            };
            check_code!(fails, co.error, NONE, "FindCoordinator v{v} group {k}");
            if co.error != NONE {
                continue;
            }
            match md.brokers.iter().find(|b| *b.node_id == co.node_id) {
                None => fails.push(format!(
                    "FindCoordinator v{v} group {k}: node {} is not a broker in Metadata",
                    co.node_id
                )),
                Some(b) => {
                    if b.host.as_str() != co.host || b.port != co.port {
                        fails.push(format!(
                            "FindCoordinator v{v} group {k}: {}:{} differs from Metadata's {}:{} for node {}",
                            co.host, co.port, b.host, b.port, co.node_id
                        ));
                    }
                }
            }
            if !ctx.external() && (co.host != ctx.broker.host || co.port != ctx.broker.port as i32)
            {
                fails.push(format!(
                    "FindCoordinator v{v} group {k}: {}:{}, expected the broker itself {}:{}",
                    co.host, co.port, ctx.broker.host, ctx.broker.port
                ));
            }
        }
    }
    // The connection still serves other requests.
    let av = ctx.max_version(ApiKey::ApiVersions);
    let r = c.call(av, &api_versions_req(av));
    check_code!(
        fails,
        r.error_code,
        NONE,
        "ApiVersions after FindCoordinator"
    );
    assert_no_failures(&fails);
}

/// Key type 1 finds the transaction coordinator: the first lookup may answer
/// COORDINATOR_NOT_AVAILABLE while `__transaction_state` is created (as Kafka's does);
/// then every version names the broker itself, and group lookups go on working.
#[test]
fn find_coordinator_transaction_key_names_the_transaction_coordinator() {
    let ctx = group_ctx(&[]);
    let mut c = ctx.client();
    let mut fails: Vec<String> = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let v = ctx.max_version(ApiKey::FindCoordinator);
    while find_coordinators(&mut c, v, KEY_TRANSACTION, &["txn-a"])[0].error != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no transaction coordinator within 15 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    for v in ctx.versions_req(ApiKey::FindCoordinator, 1, 6) {
        let keys: Vec<&str> = if v >= 4 {
            vec!["txn-a", "txn-b"]
        } else {
            vec!["txn-a"]
        };
        let res = find_coordinators(&mut c, v, KEY_TRANSACTION, &keys);
        if res.len() != keys.len() {
            fails.push(format!(
                "FindCoordinator v{v} key_type 1: {} keys asked, {} answered",
                keys.len(),
                res.len()
            ));
            continue;
        }
        for co in &res {
            check_code!(
                fails,
                co.error,
                NONE,
                "FindCoordinator v{v} key_type 1 (transaction) key {}",
                co.key
            );
            if !ctx.external() && (co.host != ctx.broker.host || co.port != ctx.broker.port as i32)
            {
                fails.push(format!(
                    "FindCoordinator v{v} transaction {}: {}:{}, expected the broker itself",
                    co.key, co.host, co.port
                ));
            }
            if v >= 4 && !keys.contains(&co.key.as_str()) {
                fails.push(format!(
                    "FindCoordinator v{v}: unexpected key {} in the answer",
                    co.key
                ));
            }
        }
        // A group lookup on the same connection still works.
        let g = find_coordinators(&mut c, v, KEY_GROUP, &["after-txn"]);
        check_code!(
            fails,
            g[0].error,
            NONE,
            "FindCoordinator v{v} group key after a transaction key"
        );
    }
    assert_no_failures(&fails);
}
