//! The frame codec against a model: a stream fed in chunks gives exactly the frames a
//! straight reading of it gives, a bad size is refused where the model refuses it, and the
//! buffer never grows towards a size announced but not sent.
#![no_main]

use bytes::BytesMut;
use kroute::protocol::frame::FrameCodec;
use kroute_fuzz::{assert_within, measure};
use libfuzzer_sys::fuzz_target;
use tokio_util::codec::Decoder;

/// The codec's growth step (frame.rs MAX_RESERVE_STEP).
const STEP: usize = 256 * 1024;

/// What a straight reading of `stream` gives: the frames, then whether it ends in an error.
fn model(stream: &[u8], max: usize) -> (Vec<&[u8]>, bool) {
    let mut frames = Vec::new();
    let mut rest = stream;
    while rest.len() >= 4 {
        let size = i32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
        if size < 0 || size as usize > max {
            return (frames, true);
        }
        let Some(frame) = rest.get(4..4 + size as usize) else {
            break;
        };
        frames.push(frame);
        rest = &rest[4 + size as usize..];
    }
    (frames, !rest.is_empty())
}

fuzz_target!(|data: &[u8]| {
    let Some((&[max_log, chunk], stream)) = data.split_first_chunk::<2>() else {
        return;
    };
    let max = 1usize << (max_log % 28);
    let chunk = usize::from(chunk % 64) + 1;
    let (want, want_error) = model(stream, max);
    // Room for every frame the stream can hold, so that only the codec's memory is measured.
    let mut got = Vec::with_capacity(stream.len() / 4 + 1);
    let (got_error, allocs) = measure(|| {
        let mut codec = FrameCodec::new(max);
        let mut buf = BytesMut::new();
        for piece in stream.chunks(chunk) {
            buf.extend_from_slice(piece);
            loop {
                match codec.decode(&mut buf) {
                    Ok(Some(frame)) => got.push(frame),
                    Ok(None) => break,
                    Err(_) => return true,
                }
            }
        }
        // Every whole frame was taken above: what is left is a truncated one, or nothing.
        match codec.decode_eof(&mut buf) {
            Ok(Some(frame)) => panic!("decode_eof found a frame decode missed: {frame:?}"),
            Ok(None) => false,
            Err(_) => true,
        }
    });
    assert_eq!(got.len(), want.len(), "frame count");
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(&g[..], *w);
    }
    assert_eq!(got_error, want_error, "error at the end of the stream");
    // One growth step, which the buffer's Vec may double when a second one follows data
    // (512 KiB), plus older buffers the frames still pin: linear in what arrived, never in
    // what a header announces.
    assert_within("frame codec", allocs, 2 * STEP + 8 * stream.len() + 8192);
});
