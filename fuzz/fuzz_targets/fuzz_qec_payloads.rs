//! QEC RPC payloads (`rocelink_wire::qec`): the first byte picks enqueue_syndromes,
//! get_corrections, reset_decoder, a correction answer or the decode report; the rest is the
//! argument (or result) bytes. Views and Reprs never panic, and what parses re-emits to the
//! same bytes (the module's guarantee: ids, counters and the reset byte are carried verbatim).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rocelink_wire::qec::{
    self, DecodeReportRepr, EnqueueSyndromes, EnqueueSyndromesRepr, GetCorrectionsRepr, ResetDecoderRepr,
    ENQUEUE_SYNDROMES_FIXED_LEN,
};

fuzz_target!(|data: &[u8]| {
    let Some((&which, buf)) = data.split_first() else {
        return;
    };
    match which % 5 {
        0 => {
            let v = EnqueueSyndromes::new_unchecked(buf);
            let _ = (v.decoder_id(), v.counter(), v.syndrome_mapping_id(), v.num_syndromes());
            let _ = (v.syndromes(), v.syndrome(0), v.syndrome(usize::MAX));
            let Ok(r) = EnqueueSyndromesRepr::parse(buf) else {
                return;
            };
            let n = usize::try_from(r.num_syndromes).expect("parse accepts only n >= 0");
            let view = EnqueueSyndromes::new_checked(buf).expect("parse checked it");
            let syn = view.syndromes();
            assert_eq!(syn.len(), n.div_ceil(8));
            assert!(r.buffer_len() <= buf.len());
            for i in [0, n.saturating_sub(1), n, n + 7] {
                let in_range = i < n && qec::bit(syn, i);
                assert_eq!(EnqueueSyndromes::new_unchecked(buf).syndrome(i), in_range);
            }
            let mut out = vec![0u8; r.buffer_len()];
            let len = r.emit_with(syn, &mut out).expect("a parsed Repr emits");
            assert_eq!(&out[..len], &buf[..len]);
            assert_eq!(EnqueueSyndromesRepr::parse(&out), Ok(r));
            // A view over a copy writes its syndromes in place and nowhere else.
            let mut copy = buf.to_vec();
            let mut w = EnqueueSyndromes::new_unchecked(&mut copy[..]);
            w.syndromes_mut().fill(0);
            assert!(copy[..ENQUEUE_SYNDROMES_FIXED_LEN] == buf[..ENQUEUE_SYNDROMES_FIXED_LEN]);
            assert!(copy[len..] == buf[len..]);
        }
        1 => {
            let Ok(g) = GetCorrectionsRepr::parse(buf) else {
                assert!(buf.len() < qec::GET_CORRECTIONS_LEN);
                return;
            };
            let mut out = [0u8; qec::GET_CORRECTIONS_LEN];
            g.emit(&mut out).unwrap();
            assert_eq!(&out[..], &buf[..qec::GET_CORRECTIONS_LEN]);
            assert_eq!(g.reset(), buf[16] != 0);
        }
        2 => {
            let Ok(r) = ResetDecoderRepr::parse(buf) else {
                assert!(buf.len() < qec::RESET_DECODER_LEN);
                return;
            };
            let mut out = [0u8; qec::RESET_DECODER_LEN];
            r.emit(&mut out).unwrap();
            assert_eq!(&out[..], &buf[..qec::RESET_DECODER_LEN]);
        }
        3 => {
            // A correction answer: the first two bytes are return_size (up to 1023 bits),
            // the rest the answer's bytes.
            let Some((size, bits)) = buf.split_first_chunk::<2>() else {
                return;
            };
            let return_size = usize::from(u16::from_le_bytes(*size) & 0x3ff);
            let mask = qec::parse_corrections(bits, return_size);
            if return_size < 64 {
                assert_eq!(mask >> return_size, 0, "bits past return_size read as zero");
            }
            let mut out = vec![0u8; qec::correction_len(return_size)];
            let len = qec::emit_corrections(mask, return_size, &mut out).unwrap();
            assert_eq!(len % 8, 0);
            assert_eq!(qec::parse_corrections(&out, return_size), mask);
            assert!(qec::emit_corrections(mask, return_size, &mut out[..len.saturating_sub(1)]).is_err() || len == 0);
        }
        _ => {
            let Ok(r) = DecodeReportRepr::parse(buf) else {
                assert!(buf.len() < qec::DECODE_REPORT_LEN);
                return;
            };
            let mut out = [0u8; qec::DECODE_REPORT_LEN];
            r.emit(&mut out).unwrap();
            assert_eq!(&out[..], &buf[..qec::DECODE_REPORT_LEN]);
        }
    }
});
