//! The ApiVersions clamp, v0-v4: an error answer passes untouched; otherwise every API kroute
//! decodes is offered at most what it decodes, no min is raised, nothing is added or lost,
//! and clamping kroute's own output changes nothing.
#![no_main]

use bytes::Bytes;
use kafka_protocol::messages::ApiVersionsResponse;
use kafka_protocol::protocol::Decodable;
use kroute::protocol::versions::{clamp_api_versions, decodable_max};
use kroute_fuzz::{assert_not_presized, measure, pick};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let version = pick(selector, 0..=4);
    let body = Bytes::copy_from_slice(body);
    let (out, allocs) = measure(|| clamp_api_versions(&body, version));
    assert_not_presized("api versions", body.len(), allocs);
    let Ok(out) = out else {
        return;
    };
    let Some(out) = out else {
        assert!(
            body.len() >= 2 && body[..2] != [0, 0],
            "a success answer was not clamped"
        );
        return;
    };
    let before = ApiVersionsResponse::decode(&mut body.clone(), version).unwrap();
    let after = ApiVersionsResponse::decode(&mut out.clone(), version)
        .expect("kroute's own output decodes");
    assert_eq!(before.api_keys.len(), after.api_keys.len());
    for (b, a) in before.api_keys.iter().zip(&after.api_keys) {
        assert_eq!((a.api_key, a.min_version), (b.api_key, b.min_version));
        match decodable_max(a.api_key) {
            Some(ours) => assert_eq!(a.max_version, b.max_version.min(ours).max(b.min_version)),
            None => assert_eq!(a.max_version, b.max_version),
        }
    }
    let again = clamp_api_versions(&out, version).unwrap().unwrap();
    assert_eq!(again, out, "clamping kroute's own output changed it");
});
