//! What the launcher and its agents say to each other over their TCP connection (one JSON
//! document per frame, after a 4-byte big-endian length), and the encoding of the agent's
//! command-line words.

use super::status::RankStatus;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use volley::bootstrap::rendezvous::Hello;

/// Largest frame: the whole job's hellos (a few hundred bytes per rank).
const MAX_FRAME: usize = 256 << 20;

/// Agent to launcher.
#[derive(Debug, Serialize, Deserialize)]
pub enum ToLauncher {
    /// First frame: the job's secret (from the agent's standard input) and which node this is.
    Auth {
        /// The launcher's one-time token.
        token: String,
        /// The agent's node index.
        node: usize,
    },
    /// The hellos of every rank of this host, in rank order (sent once all have arrived).
    Hellos(Vec<Hello>),
    /// A rank of this host ended.
    Exited {
        /// The rank.
        rank: usize,
        /// Its pid on this host.
        pid: u32,
        /// How.
        status: RankStatus,
    },
    /// The agent cannot go on (its ranks are stopped).
    Failed(String),
    /// The answers of this host's ranks to a [`ToAgent::Report`].
    Reports(Vec<RankAnswer>),
}

/// Launcher to agent.
#[derive(Debug, Serialize, Deserialize)]
pub enum ToAgent {
    /// Every rank of the job has said hello: the job's hellos, in rank order.
    Hellos(Vec<Hello>),
    /// A rank of another host exited with status 0.
    Exited(usize),
    /// Stop the ranks (SIGTERM, SIGKILL after the grace period) and leave.
    Stop,
    /// Ask this host's ranks for a hang report and send back their answers.
    Report,
}

/// One rank's answer (travels from agents to the launcher).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RankAnswer {
    /// The rank.
    pub rank: usize,
    /// Its report (a line of JSON), or why there is none.
    pub answer: Result<String, String>,
}

/// Writes one frame (a single write call, so frames of several threads sharing a locked
/// stream do not interleave).
pub fn write_frame(w: &mut impl Write, msg: &impl Serialize) -> std::io::Result<()> {
    let body = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    w.write_all(&frame)?;
    w.flush()
}

/// Largest first frame of a connection (an agent's `Auth`): read before the peer has proved
/// it belongs to the job, so that a stranger cannot make the launcher allocate much.
pub const MAX_AUTH_FRAME: usize = 4 << 10;

/// Reads one frame; `Ok(None)` at a clean end of stream between frames.
pub fn read_frame<T: DeserializeOwned>(r: &mut impl Read) -> std::io::Result<Option<T>> {
    read_frame_up_to(r, MAX_FRAME)
}

/// [`read_frame`] refusing a frame longer than `max` bytes before reading it.
pub fn read_frame_up_to<T: DeserializeOwned>(
    r: &mut impl Read,
    max: usize,
) -> std::io::Result<Option<T>> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > max.min(MAX_FRAME) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("frame of {len} bytes"),
        ));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Bytes that pass through every remote shell unchanged: `ssh` joins its arguments into a
/// line for the remote shell, `ip netns exec` passes them as they are.
fn is_plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"_./:=,@+-".contains(&b)
}

/// Whether `w` passes through every remote shell unchanged as one word.
pub fn is_plain_word(w: &OsStr) -> bool {
    let b = w.as_bytes();
    !b.is_empty() && b.iter().all(|&c| is_plain(c))
}

/// A word for the agent's command line: itself if plain, else `%` and its bytes in hex (`%`
/// is not plain, so a plain word never starts with it).
pub fn encode_word(w: &OsStr) -> String {
    if is_plain_word(w) {
        return w.to_string_lossy().into_owned();
    }
    let b = w.as_bytes();
    let mut s = String::with_capacity(1 + 2 * b.len());
    s.push('%');
    for c in b {
        s.push_str(&format!("{c:02x}"));
    }
    s
}

/// The inverse of [`encode_word`].
pub fn decode_word(w: &str) -> Result<OsString, String> {
    let Some(hex) = w.strip_prefix('%') else {
        return Ok(w.into());
    };
    // Hex digits only: `from_str_radix` would also take a sign, and slicing text that is not
    // ASCII in pairs of bytes could split a character.
    let digits = hex.as_bytes();
    if digits.len() % 2 != 0 || !digits.iter().all(u8::is_ascii_hexdigit) {
        return Err(format!("bad encoded word {w:?}"));
    }
    let nibble = |d: u8| (d as char).to_digit(16).expect("a hex digit") as u8;
    Ok(OsString::from_vec(
        digits
            .chunks_exact(2)
            .map(|p| nibble(p[0]) << 4 | nibble(p[1]))
            .collect(),
    ))
}

/// Everything a peer of the launcher's port can make it decode, from `data`: a stream of frames
/// read as each side reads them, and a command-line word (what decodes must encode back to
/// itself). The fuzz target `launcher_wire` (fuzz/) runs it; the tests replay its corpus.
#[allow(dead_code)] // The binary itself never calls it.
pub fn decode_anything(data: &[u8]) {
    let mut stream = data;
    while let Ok(Some(_)) = read_frame::<ToLauncher>(&mut stream) {}
    let mut stream = data;
    while let Ok(Some(_)) = read_frame::<ToAgent>(&mut stream) {}
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(word) = decode_word(text) {
            assert_eq!(
                decode_word(&encode_word(&word)).as_deref(),
                Ok(word.as_os_str())
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_words_are_hex_digits_only() {
        // A sign, or a character of several bytes, is no hex digit (both were once taken:
        // the second split a character and panicked).
        for bad in ["%+A", "%+A+A+\u{48d}A+A", "%0g", "%abc", "%-1"] {
            assert!(decode_word(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            decode_word("%41ff").unwrap(),
            OsString::from_vec(vec![0x41, 0xff])
        );
        assert_eq!(decode_word("%4A").unwrap(), OsString::from("J"));
    }

    #[test]
    fn a_first_frame_over_the_auth_limit_is_refused_before_it_is_read() {
        // A stranger announcing 200 MiB: refused on its length alone.
        let mut bytes = (200u32 << 20).to_be_bytes().to_vec();
        bytes.extend_from_slice(b"{}");
        let err = read_frame_up_to::<ToLauncher>(&mut &bytes[..], MAX_AUTH_FRAME).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        // A real Auth frame fits.
        let mut frame = Vec::new();
        let auth = ToLauncher::Auth {
            token: "t".repeat(64),
            node: 3,
        };
        write_frame(&mut frame, &auth).unwrap();
        assert!(frame.len() < MAX_AUTH_FRAME);
        let back = read_frame_up_to::<ToLauncher>(&mut &frame[..], MAX_AUTH_FRAME).unwrap();
        assert!(matches!(back, Some(ToLauncher::Auth { node: 3, .. })));
    }

    #[test]
    fn the_fuzz_corpus_decodes_without_a_panic() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
        let mut inputs = 0;
        for dir in ["corpus", "regressions"] {
            let Ok(entries) = std::fs::read_dir(root.join(dir).join("launcher_wire")) else {
                continue;
            };
            for entry in entries {
                decode_anything(&std::fs::read(entry.unwrap().path()).unwrap());
                inputs += 1;
            }
        }
        assert!(
            inputs > 0,
            "no fuzz corpus for launcher_wire under {}",
            root.display()
        );
    }

    #[test]
    fn words_round_trip_and_plain_ones_stay_readable() {
        for w in [
            "",
            "a b",
            "echo $X; 'q'",
            "%41",
            "plain-word_1.0:x=y,z",
            "-c",
            "é\n",
        ] {
            let e = encode_word(OsStr::new(w));
            assert!(e.bytes().all(|b| is_plain(b) || b == b'%'), "{e}");
            assert_eq!(decode_word(&e).unwrap(), OsStr::new(w));
        }
        assert_eq!(encode_word(OsStr::new("/bin/sh")), "/bin/sh");
        assert!(decode_word("%4").is_err());
    }

    #[test]
    fn frames_round_trip_and_end_cleanly() {
        let mut buf = Vec::new();
        write_frame(&mut buf, &ToAgent::Exited(3)).unwrap();
        write_frame(&mut buf, &ToAgent::Stop).unwrap();
        let mut r = &buf[..];
        assert!(matches!(
            read_frame(&mut r).unwrap(),
            Some(ToAgent::Exited(3))
        ));
        assert!(matches!(read_frame(&mut r).unwrap(), Some(ToAgent::Stop)));
        assert!(read_frame::<ToAgent>(&mut r).unwrap().is_none());
        let mut cut = &buf[..6];
        assert!(read_frame::<ToAgent>(&mut cut).is_err());
    }
}
