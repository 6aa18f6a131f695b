//! HPACK's Huffman code (RFC 7541, Appendix B), decoded four bits at a time.
//!
//! The code is canonical: within each length the codes are consecutive in the order of
//! their symbols, and each length starts where the one before ended, shifted left. So
//! it is fully given by which symbols have codes of which length ([`GROUPS`]); the
//! decoding table is derived from that once, when first needed (a trie of the codes
//! walked four bits at a time from each of its 256 inner nodes).

use std::sync::OnceLock;

/// The end-of-string symbol: thirty one-bits, never valid inside a string.
const EOS: u16 = 256;

/// The symbols whose codes have each length, shortest first (RFC 7541, Appendix B).
const GROUPS: &[(u32, &[u16])] = &[
    (5, &[48, 49, 50, 97, 99, 101, 105, 111, 115, 116]),
    (
        6,
        &[
            32, 37, 45, 46, 47, 51, 52, 53, 54, 55, 56, 57, 61, 65, 95, 98, 100, 102, 103, 104,
            108, 109, 110, 112, 114, 117,
        ],
    ),
    (
        7,
        &[
            58, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86,
            87, 89, 106, 107, 113, 118, 119, 120, 121, 122,
        ],
    ),
    (8, &[38, 42, 44, 59, 88, 90]),
    (10, &[33, 34, 40, 41, 63]),
    (11, &[39, 43, 124]),
    (12, &[35, 62]),
    (13, &[0, 36, 64, 91, 93, 126]),
    (14, &[94, 125]),
    (15, &[60, 96, 123]),
    (19, &[92, 195, 208]),
    (20, &[128, 130, 131, 162, 184, 194, 224, 226]),
    (
        21,
        &[
            153, 161, 167, 172, 176, 177, 179, 209, 216, 217, 227, 229, 230,
        ],
    ),
    (
        22,
        &[
            129, 132, 133, 134, 136, 146, 154, 156, 160, 163, 164, 169, 170, 173, 178, 181, 185,
            186, 187, 189, 190, 196, 198, 228, 232, 233,
        ],
    ),
    (
        23,
        &[
            1, 135, 137, 138, 139, 140, 141, 143, 147, 149, 150, 151, 152, 155, 157, 158, 165, 166,
            168, 174, 175, 180, 182, 183, 188, 191, 197, 231, 239,
        ],
    ),
    (
        24,
        &[9, 142, 144, 145, 148, 159, 171, 206, 215, 225, 236, 237],
    ),
    (25, &[199, 207, 234, 235]),
    (
        26,
        &[
            192, 193, 200, 201, 202, 205, 210, 213, 218, 219, 238, 240, 242, 243, 255,
        ],
    ),
    (
        27,
        &[
            203, 204, 211, 212, 214, 221, 222, 223, 241, 244, 245, 246, 247, 248, 250, 251, 252,
            253, 254,
        ],
    ),
    (
        28,
        &[
            2, 3, 4, 5, 6, 7, 8, 11, 12, 14, 15, 16, 17, 18, 19, 20, 21, 23, 24, 25, 26, 27, 28,
            29, 30, 31, 127, 220, 249,
        ],
    ),
    (30, &[10, 13, 22, EOS]),
];

/// Each symbol's code and its length in bits, from [`GROUPS`].
fn codes() -> [(u32, u32); 257] {
    let mut codes = [(0, 0); 257];
    let (mut code, mut previous) = (0u32, GROUPS[0].0);
    for &(length, symbols) in GROUPS {
        code <<= length - previous;
        previous = length;
        for &symbol in symbols {
            codes[usize::from(symbol)] = (code, length);
            code += 1;
        }
    }
    codes
}

/// One step of the decoder: from a state (an inner node of the code's trie, the root
/// being 0), four bits of input lead to `next`, having completed `symbol` on the way
/// if `EMIT` is set.
#[derive(Clone, Copy, Default)]
struct Step {
    next: u8,
    symbol: u8,
    flags: u8,
}

/// The step completed a symbol.
const EMIT: u8 = 1;
/// The step met EOS, or a code that is none.
const FAIL: u8 = 2;
/// The string may end in the state the step leads to: the bits since the last symbol
/// are fewer than eight and all ones (a prefix of EOS, RFC 7541 §5.2).
const ACCEPT: u8 = 4;

struct Table {
    steps: Box<[[Step; 16]; 256]>,
}

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(build)
}

/// A trie child: an inner node or a symbol.
#[derive(Clone, Copy)]
enum Child {
    None,
    Node(u8),
    Symbol(u16),
}

fn build() -> Table {
    // The trie: 256 inner nodes for 257 symbols; `ones[n]` is the depth of node `n`
    // when the path to it is all ones, else `u32::MAX`.
    let mut children = vec![[Child::None; 2]];
    let mut ones = vec![0u32];
    for (symbol, &(code, length)) in codes().iter().enumerate() {
        let mut node = 0usize;
        for bit in (0..length).rev() {
            let b = ((code >> bit) & 1) as usize;
            if bit == 0 {
                children[node][b] = Child::Symbol(symbol as u16);
                break;
            }
            node = match children[node][b] {
                Child::Node(next) => usize::from(next),
                _ => {
                    let next = children.len();
                    children.push([Child::None; 2]);
                    let depth = if b == 1 && ones[node] != u32::MAX {
                        ones[node] + 1
                    } else {
                        u32::MAX
                    };
                    ones.push(depth);
                    children[node][b] = Child::Node(next as u8);
                    next
                }
            };
        }
    }
    debug_assert_eq!(children.len(), 256);
    let mut steps = Box::new([[Step::default(); 16]; 256]);
    for (state, row) in steps.iter_mut().enumerate() {
        for (nibble, step) in row.iter_mut().enumerate() {
            let mut node = state;
            for bit in (0..4).rev() {
                match children[node][(nibble >> bit) & 1] {
                    Child::Node(next) => node = usize::from(next),
                    Child::Symbol(EOS) | Child::None => {
                        step.flags = FAIL;
                        break;
                    }
                    Child::Symbol(symbol) => {
                        // The shortest code is five bits: one symbol at most per step.
                        step.symbol = symbol as u8;
                        step.flags |= EMIT;
                        node = 0;
                    }
                }
            }
            step.next = node as u8;
            if node == 0 || ones[node] < 8 {
                step.flags |= ACCEPT;
            }
        }
    }
    Table { steps }
}

/// The Huffman-coded string `src`, decoded onto the end of `dst`; `Err` (with `dst`
/// holding part of it) when it is not a valid coding (EOS in it, or padding that is
/// not a short run of one-bits).
pub(crate) fn decode(src: &[u8], dst: &mut impl Extend<u8>) -> Result<(), ()> {
    let steps = &table().steps;
    let (mut state, mut accept) = (0usize, true);
    let mut emit = |nibble: u8, state: &mut usize| -> Result<bool, ()> {
        let step = steps[*state][usize::from(nibble)];
        if step.flags & FAIL != 0 {
            return Err(());
        }
        if step.flags & EMIT != 0 {
            dst.extend(Some(step.symbol));
        }
        *state = usize::from(step.next);
        Ok(step.flags & ACCEPT != 0)
    };
    for &byte in src {
        emit(byte >> 4, &mut state)?;
        accept = emit(byte & 0xf, &mut state)?;
    }
    if accept {
        Ok(())
    } else {
        Err(())
    }
}

/// `src` Huffman-coded onto the end of `dst` (fuseway sends its own fields as they
/// are; the tests code strings the way clients send them).
#[cfg(test)]
pub(crate) fn encode(src: &[u8], dst: &mut Vec<u8>) {
    let codes = codes();
    let (mut bits, mut pending) = (0u64, 0u32);
    for &byte in src {
        let (code, length) = codes[usize::from(byte)];
        bits = (bits << length) | u64::from(code);
        pending += length;
        while pending >= 8 {
            pending -= 8;
            dst.push((bits >> pending) as u8);
        }
    }
    if pending > 0 {
        // Padded with the most significant bits of EOS: ones.
        dst.push(((bits << (8 - pending)) as u8) | (0xff >> pending));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(src: &[u8]) -> Result<Vec<u8>, ()> {
        let mut out = Vec::new();
        decode(src, &mut out).map(|()| out)
    }

    #[test]
    fn every_symbol_has_one_code_and_eos_is_thirty_ones() {
        let mut seen = [false; 257];
        for &(_, symbols) in GROUPS {
            for &s in symbols {
                assert!(!seen[usize::from(s)], "symbol {s} listed twice");
                seen[usize::from(s)] = true;
            }
        }
        assert!(seen.iter().all(|&s| s));
        assert_eq!(codes()[256], ((1 << 30) - 1, 30));
        // Spot checks against RFC 7541, Appendix B.
        assert_eq!(codes()[usize::from(b'0')], (0x0, 5));
        assert_eq!(codes()[usize::from(b' ')], (0x14, 6));
        assert_eq!(codes()[usize::from(b'&')], (0xf8, 8));
        assert_eq!(codes()[0], (0x1ff8, 13));
        assert_eq!(codes()[255], (0x3ffffee, 26));
    }

    /// The strings of RFC 7541, Appendix C.4 and C.6, as coded there.
    #[test]
    fn decodes_the_rfc_examples() {
        let cases: &[(&str, &[u8])] = &[
            (
                "www.example.com",
                &[
                    0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
                ],
            ),
            ("no-cache", &[0xa8, 0xeb, 0x10, 0x64, 0x9c, 0xbf]),
            (
                "custom-key",
                &[0x25, 0xa8, 0x49, 0xe9, 0x5b, 0xa9, 0x7d, 0x7f],
            ),
            (
                "custom-value",
                &[0x25, 0xa8, 0x49, 0xe9, 0x5b, 0xb8, 0xe8, 0xb4, 0xbf],
            ),
            ("302", &[0x64, 0x02]),
            ("private", &[0xae, 0xc3, 0x77, 0x1a, 0x4b]),
        ];
        for (text, coded) in cases {
            assert_eq!(decoded(coded).as_deref(), Ok(text.as_bytes()), "{text}");
            let mut again = Vec::new();
            encode(text.as_bytes(), &mut again);
            assert_eq!(&again, coded, "{text}");
        }
    }

    #[test]
    fn every_byte_value_round_trips() {
        let all: Vec<u8> = (0..=255).collect();
        for take in [1, 2, 3, 7, 64, 256] {
            for chunk in all.chunks(take) {
                let mut coded = Vec::new();
                encode(chunk, &mut coded);
                assert_eq!(decoded(&coded).as_deref(), Ok(chunk));
            }
        }
        assert_eq!(decoded(&[]).as_deref(), Ok(&[][..]));
    }

    #[test]
    fn bad_padding_and_eos_are_refused() {
        // '0' is 00000: padded with zeros instead of ones.
        assert_eq!(decoded(&[0x00]), Err(()));
        // A whole byte of ones after a symbol: padding of eight bits or more.
        let mut coded = Vec::new();
        encode(b"a", &mut coded);
        coded.push(0xff);
        assert_eq!(decoded(&coded), Err(()));
        // EOS itself (thirty ones, then two of padding).
        assert_eq!(decoded(&[0xff, 0xff, 0xff, 0xff]), Err(()));
    }
}
