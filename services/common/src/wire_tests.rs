//! The walk over real `ufo.v1` messages.

use super::*;
use ufo_proto::json::to_struct;
use ufo_proto::v1::{Action, RecordStepRequest, Step};

fn descriptors() -> Descriptors {
    Descriptors::from_sets(&[ufo_proto::FILE_DESCRIPTOR_SET]).unwrap()
}

const RULES: Rules = Rules {
    reject_nul: true,
    max_json_depth: 8,
};

fn record_step(step: Step) -> Vec<u8> {
    RecordStepRequest {
        step: Some(step),
        ..RecordStepRequest::default()
    }
    .encode_to_vec()
}

const RECORD_STEP: &str = "ufo.v1.RecordStepRequest";

#[test]
fn unary_methods_map_to_their_input_and_streaming_requests_are_left_alone() {
    let d = descriptors();
    assert_eq!(
        d.input_of("/ufo.v1.SessionStore/RecordStep"),
        Some(RECORD_STEP)
    );
    assert_eq!(
        d.input_of("/ufo.v1.AgentService/StreamSteps"),
        Some("ufo.v1.StreamStepsRequest"),
        "a server-streaming call still has one request message"
    );
    assert_eq!(d.input_of("/ufo.v1.SessionStore/Nope"), None);
}

#[test]
fn nul_is_found_in_strings_and_json_and_named() {
    let d = descriptors();
    let ok = Step {
        thought: "fine".into(),
        ..Step::default()
    };
    assert_eq!(d.check(RECORD_STEP, &record_step(ok), RULES), Ok(()));

    let bad = Step {
        thought: "a\0b".into(),
        ..Step::default()
    };
    let err = d.check(RECORD_STEP, &record_step(bad), RULES).unwrap_err();
    assert_eq!(err.to_string(), "step.thought: contains a NUL character");

    let args = serde_json::json!({"outer": {"list": [1, "x\u{0}"]}});
    let bad = Step {
        actions: vec![
            Action::default(),
            Action {
                arguments: Some(to_struct(args).unwrap()),
                ..Action::default()
            },
        ],
        ..Step::default()
    };
    let err = d.check(RECORD_STEP, &record_step(bad), RULES).unwrap_err();
    assert_eq!(err.field, "step.actions[1].arguments.outer.list[1]");

    let key = serde_json::json!({"k\u{0}": 1});
    let bad = Step {
        extra: Some(to_struct(key).unwrap()),
        ..Step::default()
    };
    let err = d.check(RECORD_STEP, &record_step(bad), RULES).unwrap_err();
    assert_eq!(err.field, "step.extra.k\\0");

    let lenient = Rules {
        reject_nul: false,
        ..RULES
    };
    let nul = Step {
        thought: "a\0b".into(),
        ..Step::default()
    };
    assert_eq!(d.check(RECORD_STEP, &record_step(nul), lenient), Ok(()));
}

#[test]
fn json_depth_is_bounded() {
    let d = descriptors();
    let nest = |levels: usize| {
        let mut v = serde_json::json!(1);
        for _ in 0..levels {
            v = serde_json::json!({ "a": v });
        }
        record_step(Step {
            extra: Some(to_struct(v).unwrap()),
            ..Step::default()
        })
    };
    assert_eq!(d.check(RECORD_STEP, &nest(8), RULES), Ok(()));
    let err = d.check(RECORD_STEP, &nest(9), RULES).unwrap_err();
    assert!(err.problem.contains("deeper than 8"), "{err}");
}

#[test]
fn undecodable_bytes_and_bad_utf8_are_refused() {
    let d = descriptors();
    // Field 1 (step) announced 100 bytes long, 1 present.
    assert!(d.check(RECORD_STEP, &[0x0a, 100, 0], RULES).is_err());
    // Wire type 7 does not exist.
    assert!(d.check(RECORD_STEP, &[0x0f], RULES).is_err());
    // Field 1 (a message) sent as a varint.
    assert!(d.check(RECORD_STEP, &[0x08, 1], RULES).is_err());
    // step.thought (field 9 in Step? found from the encoding, not assumed) with invalid UTF-8.
    let mut bytes = record_step(Step {
        thought: "\u{e9}".into(),
        ..Step::default()
    });
    let at = bytes.iter().rposition(|b| *b == 0xa9).unwrap();
    bytes[at] = 0xff;
    let err = d.check(RECORD_STEP, &bytes, RULES).unwrap_err();
    assert_eq!(err.to_string(), "step.thought: not valid UTF-8");
    // Unknown fields are skipped, as prost skips them.
    assert_eq!(d.check(RECORD_STEP, &[0xf8, 0x3f, 1], RULES), Ok(()));
}

#[test]
fn every_prost_decodable_message_passes_and_prost_failures_fail() {
    // Random bytes: whenever prost decodes them, the walk must agree it is well-formed (the walk must
    // never refuse a request tonic would have served).
    let d = descriptors();
    let mut seed = 0x9e3779b97f4a7c15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..20_000 {
        let len = (next() % 24) as usize;
        let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if RecordStepRequest::decode(bytes.as_slice()).is_ok() {
            let lenient = Rules {
                reject_nul: false,
                max_json_depth: 100,
            };
            assert_eq!(d.check(RECORD_STEP, &bytes, lenient), Ok(()), "{bytes:?}");
        }
    }
}

/// A bytes field sent with another wire type (a fixed64 where `PutBlobRequest.data` belongs) is refused
/// here, naming the field, instead of reaching prost, whose decode error tonic reports as INTERNAL.
#[test]
fn a_bytes_field_with_another_wire_type_is_undecodable() {
    let d = descriptors();
    // Field 1 (data), wire type 1 (64-bit), eight bytes.
    let mut bytes = vec![(1 << 3) | 1];
    bytes.extend_from_slice(&[7; 8]);
    let problem = d.check("ufo.v1.PutBlobRequest", &bytes, RULES).unwrap_err();
    assert_eq!(problem.field, "data");
    assert_eq!(problem.problem, UNDECODABLE);
    // Length-delimited, as prost encodes it: accepted.
    let good = ufo_proto::v1::PutBlobRequest {
        data: vec![1, 2, 3].into(),
        sha256: String::new(),
    }
    .encode_to_vec();
    assert!(d.check("ufo.v1.PutBlobRequest", &good, RULES).is_ok());
}
