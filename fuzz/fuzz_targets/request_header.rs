//! The request header (api key, version, correlation id), the Produce head (client id,
//! tagged fields, transactional id, acks) in every version, and the response header; and what
//! kroute reads of a passthrough client's SASL exchange (the token of a SaslAuthenticate
//! request, the principal each mechanism names in it, the broker's answer).
#![no_main]

use bytes::Bytes;
use kroute::protocol::header::{
    RequestHead, produce_head, response_body_offset, response_correlation_id, split_response,
};
use kroute::security::principal::{Mechanism, accepted, request_token};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match RequestHead::parse(data) {
        Ok(head) => {
            assert!(data.len() >= 8);
            let _ = head.api();
        }
        Err(_) => assert!(data.len() < 8),
    }
    for version in -1..=14 {
        if let Ok(head) = produce_head(data, version) {
            // The body starts inside the payload, after the 8 fixed bytes and a client id.
            assert!(head.body_offset >= 10 && head.body_offset <= data.len());
            assert!(version < 3 || head.body_offset + 2 <= data.len());
        }
    }
    let payload = Bytes::copy_from_slice(data);
    for header_version in [0, 1] {
        match response_body_offset(data, header_version) {
            Ok(at) => {
                assert!(at >= 4 && at <= data.len());
                let (head, body) = split_response(&payload, header_version).unwrap();
                assert_eq!(head.len(), at);
                assert_eq!(head.len() + body.len(), data.len());
                assert!(response_correlation_id(data).is_ok());
            }
            Err(_) => assert!(split_response(&payload, header_version).is_err()),
        }
    }
    for mechanism in [Mechanism::Plain, Mechanism::ScramSha512, Mechanism::OAuthBearer] {
        let _ = mechanism.principal(data);
        for version in 0..=2 {
            let _ = accepted(&payload, version, mechanism);
        }
    }
    for version in 0..=2 {
        let _ = request_token(data, version);
    }
});
