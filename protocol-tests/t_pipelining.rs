//! Pipelining: many requests written back-to-back before reading; responses must come
//! back in request order (correlation ids), and requests must be processed in order.

use std::time::{Duration, Instant};

use kafka_protocol::messages::*;

use crate::broker::now_ms;
use crate::client::{encode_body, encode_header, frame};
use crate::ops::*;
use crate::records::batch_of;

#[derive(Debug)]
enum Expect {
    ApiVersions(i16),
    Metadata(i16),
    Produce(i16, i64),
    ListOffsets(i16, i64),
    Fetch(i16, i64),
    ParkedFetch(i16),
    DescribeCluster(i16),
    DescribeConfigs(i16),
}

fn pick(vs: &[i16], i: usize) -> i16 {
    vs[i % vs.len()]
}

#[test]
fn pipelined_requests_answered_in_order() {
    let ctx = Ctx::new();
    let p = ctx.topic("pipe", 1, &[]);
    let q = ctx.topic("pipe-empty", 1, &[]);
    let av = ctx.versions_req(ApiKey::ApiVersions, 0, 4);
    let mv = ctx.versions_req(ApiKey::Metadata, 1, 13);
    let pv = ctx.versions_req(ApiKey::Produce, 3, 13);
    let lv = ctx.versions_req(ApiKey::ListOffsets, 1, 10);
    let fv = ctx.versions_req(ApiKey::Fetch, 4, 18);
    let dv = ctx.versions_req(ApiKey::DescribeCluster, 0, 2);
    let cv = ctx.versions_req(ApiKey::DescribeConfigs, 1, 4);

    let mut c = ctx.client();
    c.set_read_timeout(Duration::from_secs(30));
    let mut wire = Vec::new();
    let mut expect: Vec<(i32, i16, Expect)> = Vec::new();
    let mut produced = 0i64;
    for i in 0..50usize {
        let corr = c.next_correlation_id();
        let (api, body, e) = if i == 5 || i == 33 {
            let v = pick(&fv, i);
            let o = FetchOpts {
                max_wait_ms: 500,
                min_bytes: 1,
                ..FetchOpts::at(0)
            };
            (
                ApiKey::Fetch,
                encode_body(&fetch_req(v, &q, 0, o), "Fetch", v),
                Expect::ParkedFetch(v),
            )
        } else {
            match i % 7 {
                0 => {
                    let v = pick(&av, i);
                    (
                        ApiKey::ApiVersions,
                        encode_body(&api_versions_req(v), "ApiVersions", v),
                        Expect::ApiVersions(v),
                    )
                }
                1 => {
                    let v = pick(&mv, i);
                    (
                        ApiKey::Metadata,
                        encode_body(&metadata_req(v, Some(&[&p.name]), false), "Metadata", v),
                        Expect::Metadata(v),
                    )
                }
                2 | 4 => {
                    let v = pick(&pv, i);
                    let e = Expect::Produce(v, produced);
                    produced += 1;
                    (
                        ApiKey::Produce,
                        encode_body(
                            &produce_req(v, &p, 0, batch_of(1, now_ms()), -1),
                            "Produce",
                            v,
                        ),
                        e,
                    )
                }
                3 => {
                    let v = pick(&lv, i);
                    (
                        ApiKey::ListOffsets,
                        encode_body(&list_offsets_req(v, &p.name, 0, LATEST), "ListOffsets", v),
                        Expect::ListOffsets(v, produced),
                    )
                }
                5 => {
                    let v = pick(&fv, i);
                    (
                        ApiKey::Fetch,
                        encode_body(
                            &fetch_req(
                                v,
                                &p,
                                0,
                                FetchOpts {
                                    min_bytes: 0,
                                    ..FetchOpts::at(0)
                                },
                            ),
                            "Fetch",
                            v,
                        ),
                        Expect::Fetch(v, produced),
                    )
                }
                _ => {
                    if i % 2 == 0 {
                        let v = pick(&dv, i);
                        (
                            ApiKey::DescribeCluster,
                            encode_body(&describe_cluster_req(v), "DescribeCluster", v),
                            Expect::DescribeCluster(v),
                        )
                    } else {
                        let v = pick(&cv, i);
                        let r = DescribeConfigsRequest::default().with_resources(vec![
                            describe_configs_request::DescribeConfigsResource::default()
                                .with_resource_type(RESOURCE_TOPIC)
                                .with_resource_name(sb(&p.name))
                                .with_configuration_keys(None),
                        ]);
                        (
                            ApiKey::DescribeConfigs,
                            encode_body(&r, "DescribeConfigs", v),
                            Expect::DescribeConfigs(v),
                        )
                    }
                }
            }
        };
        let v = match &e {
            Expect::ApiVersions(v)
            | Expect::Metadata(v)
            | Expect::Produce(v, _)
            | Expect::ListOffsets(v, _)
            | Expect::Fetch(v, _)
            | Expect::ParkedFetch(v)
            | Expect::DescribeCluster(v)
            | Expect::DescribeConfigs(v) => *v,
        };
        let mut payload = encode_header(api as i16, v, corr, Some(crate::client::CLIENT_ID));
        payload.extend_from_slice(&body);
        wire.extend_from_slice(&frame(&payload));
        expect.push((corr, api as i16, e));
    }
    let start = Instant::now();
    c.write_all(&wire).expect("write 50 pipelined requests");

    for (i, (corr, api, e)) in expect.iter().enumerate() {
        let what = format!("pipelined response #{i} ({e:?})");
        match e {
            Expect::ApiVersions(v) => {
                let r: ApiVersionsResponse = c.recv(*api, *v, *corr);
                assert_code!(r.error_code, NONE, "{what}");
            }
            Expect::Metadata(v) => {
                let r: MetadataResponse = c.recv(*api, *v, *corr);
                assert_eq!(r.topics.len(), 1, "{what}");
                assert_code!(r.topics[0].error_code, NONE, "{what}");
            }
            Expect::Produce(v, off) => {
                let r: ProduceResponse = c.recv(*api, *v, *corr);
                let pr = &r.responses[0].partition_responses[0];
                assert_code!(pr.error_code, NONE, "{what}");
                assert_eq!(
                    pr.base_offset, *off,
                    "{what}: produces must be applied in request order"
                );
            }
            Expect::ListOffsets(v, leo) => {
                let r: ListOffsetsResponse = c.recv(*api, *v, *corr);
                let pr = &r.topics[0].partitions[0];
                assert_code!(pr.error_code, NONE, "{what}");
                assert_eq!(
                    pr.offset, *leo,
                    "{what}: must see exactly the produces pipelined before it"
                );
            }
            Expect::Fetch(v, hw) => {
                let r: FetchResponse = c.recv(*api, *v, *corr);
                let (_, pd) = fetch_partition(*v, r, &p, 0);
                assert_code!(pd.error_code, NONE, "{what}");
                assert_eq!(
                    pd.high_watermark, *hw,
                    "{what}: high watermark must reflect exactly the earlier produces"
                );
            }
            Expect::ParkedFetch(v) => {
                let r: FetchResponse = c.recv(*api, *v, *corr);
                let (_, pd) = fetch_partition(*v, r, &q, 0);
                assert_code!(pd.error_code, NONE, "{what}");
                assert!(
                    records_of(&pd).is_empty(),
                    "{what}: records from an empty topic"
                );
            }
            Expect::DescribeCluster(v) => {
                let r: DescribeClusterResponse = c.recv(*api, *v, *corr);
                assert_code!(r.error_code, NONE, "{what}");
            }
            Expect::DescribeConfigs(v) => {
                let r: DescribeConfigsResponse = c.recv(*api, *v, *corr);
                assert_code!(r.results[0].error_code, NONE, "{what}");
            }
        }
    }
    let el = start.elapsed();
    // Parked fetches (500 ms long polls) are in the pipeline; later responses wait for them.
    assert!(
        el >= Duration::from_millis(450),
        "50 pipelined responses (with 500 ms long polls) took only {el:?}"
    );
    assert!(
        el < Duration::from_secs(20),
        "50 pipelined responses took {el:?}"
    );
    assert_eq!(offset_for(&ctx, &mut c, &p.name, 0, LATEST), produced);
}

/// More pipelined requests than the broker reads ahead (tern: 64): no deadlock, all answered
/// in order, while the client writes everything before reading anything.
#[test]
fn deep_pipeline_beyond_read_ahead() {
    let ctx = Ctx::new();
    let p = ctx.topic("pipe-deep", 1, &[]);
    let av = ctx.max_version(ApiKey::ApiVersions);
    let mv = ctx.max_version(ApiKey::Metadata);
    let pv = ctx.max_version(ApiKey::Produce);
    let mut c = ctx.client();
    c.set_read_timeout(Duration::from_secs(30));
    let n = 300usize;
    let mut wire = Vec::new();
    let mut expect = Vec::new();
    for i in 0..n {
        let corr = c.next_correlation_id();
        let (api, v, body) = match i % 3 {
            0 => (
                ApiKey::ApiVersions,
                av,
                encode_body(&api_versions_req(av), "ApiVersions", av),
            ),
            1 => (
                ApiKey::Metadata,
                mv,
                encode_body(&metadata_req(mv, Some(&[&p.name]), false), "Metadata", mv),
            ),
            _ => (
                ApiKey::Produce,
                pv,
                encode_body(
                    &produce_req(pv, &p, 0, batch_of(1, now_ms()), -1),
                    "Produce",
                    pv,
                ),
            ),
        };
        let mut payload = encode_header(api as i16, v, corr, Some(crate::client::CLIENT_ID));
        payload.extend_from_slice(&body);
        wire.extend_from_slice(&frame(&payload));
        expect.push((corr, api, v));
    }
    c.write_all(&wire).expect("write pipelined requests");
    let mut produced = 0i64;
    for (i, (corr, api, v)) in expect.into_iter().enumerate() {
        match api {
            ApiKey::ApiVersions => {
                let r: ApiVersionsResponse = c.recv(api as i16, v, corr);
                assert_code!(r.error_code, NONE, "deep pipeline #{i}");
            }
            ApiKey::Metadata => {
                let r: MetadataResponse = c.recv(api as i16, v, corr);
                assert_eq!(r.topics.len(), 1, "deep pipeline #{i}");
            }
            _ => {
                let r: ProduceResponse = c.recv(api as i16, v, corr);
                let pr = &r.responses[0].partition_responses[0];
                assert_code!(pr.error_code, NONE, "deep pipeline #{i}");
                assert_eq!(
                    pr.base_offset, produced,
                    "deep pipeline #{i}: produce order"
                );
                produced += 1;
            }
        }
    }
    assert_eq!(offset_for(&ctx, &mut c, &p.name, 0, LATEST), produced);
}
