//! Transport ids as SPDK writes them:
//! `trtype:TCP adrfam:IPv4 traddr:127.0.0.1 trsvcid:4420 subnqn:nqn.2026-01.test:sub1`
//! (and `hostnqn:NQN`). Keys are case-insensitive, `key=value` is accepted too, tokens are
//! separated by white space, and only the first `:`/`=` of a token separates key from value
//! (NQNs and IPv6 addresses contain colons). `hdgst:1` and `ddgst:1` ask for header and data
//! digests (SPDK's perf takes these as flags). Without `subnqn` the id names the discovery
//! subsystem (`nqn.2014-08.org.nvmexpress.discovery`), as in SPDK.

use std::net::{IpAddr, SocketAddr};

use nvme_spec::fabrics::{nqn_field, DISCOVERY_NQN, NQN_MAX_LEN};
use nvme_spec::tcp::DEFAULT_PORT;

/// Address family of `traddr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressFamily {
    /// IPv4.
    Ipv4,
    /// IPv6.
    Ipv6,
}

/// A parsed NVMe/TCP transport id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportId {
    /// Address family (from `adrfam`, or from the address).
    pub adrfam: AddressFamily,
    /// Target IP address.
    pub traddr: IpAddr,
    /// Target TCP port (`trsvcid`, default 4420).
    pub trsvcid: u16,
    /// NVM subsystem NQN to connect to.
    pub subnqn: String,
    /// Host NQN to present (default: one derived from the host id, see `TcpOptions`).
    pub hostnqn: Option<String>,
    /// Header digests requested (`hdgst:1`).
    pub hdgst: bool,
    /// Data digests requested (`ddgst:1`).
    pub ddgst: bool,
}

/// Why a transport id could not be parsed. Each message shows the accepted form.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[allow(missing_docs)]
pub enum TridError {
    #[error("`{token}` in transport id `{input}` is not key:value; write e.g. `trtype:TCP traddr:127.0.0.1 trsvcid:4420 subnqn:NQN`")]
    NotKeyValue { token: String, input: String },
    #[error("unknown key `{key}` in transport id `{input}`: accepted are trtype, adrfam, traddr, trsvcid, subnqn, hostnqn, hdgst, ddgst")]
    UnknownKey { key: String, input: String },
    #[error("`{key}` appears more than once in transport id `{input}`")]
    Duplicate { key: String, input: String },
    #[error("transport id `{input}` has no trtype: add `trtype:TCP`")]
    MissingTrtype { input: String },
    #[error("trtype `{trtype}` is not TCP (this parser reads NVMe/TCP transport ids)")]
    NotTcp { trtype: String },
    #[error("transport id `{input}` has no traddr: add the target's IP address, e.g. `traddr:127.0.0.1`")]
    MissingTraddr { input: String },
    #[error("traddr `{traddr}` is not an IPv4 or IPv6 address (give the numeric address, e.g. 127.0.0.1 or ::1)")]
    BadTraddr { traddr: String },
    #[error("adrfam `{adrfam}` is not supported: use IPv4 or IPv6")]
    BadAdrfam { adrfam: String },
    #[error("adrfam {adrfam} does not match traddr {traddr}")]
    AdrfamMismatch { adrfam: String, traddr: String },
    #[error("trsvcid `{trsvcid}` is not a TCP port (1..=65535; NVMe/TCP uses 4420)")]
    BadPort { trsvcid: String },
    #[error("{key} `{nqn}` is not a valid NQN: it must be 1..={NQN_MAX_LEN} bytes without NUL and start with `nqn.`")]
    BadNqn { key: &'static str, nqn: String },
    #[error("{key} `{value}` must be 0 or 1")]
    BadFlag { key: &'static str, value: String },
}

/// Whether `arg` looks like an NVMe/TCP transport id (has a `trtype:TCP` token), as opposed
/// to a PCI address or a PCIe transport id.
pub fn is_tcp_transport_id(arg: &str) -> bool {
    arg.split_whitespace().any(|t| {
        t.split_once([':', '='])
            .is_some_and(|(k, v)| k.eq_ignore_ascii_case("trtype") && v.eq_ignore_ascii_case("tcp"))
    })
}

fn check_nqn(key: &'static str, nqn: &str) -> Result<String, TridError> {
    if nqn.is_empty() || !nqn.starts_with("nqn.") || nqn_field(nqn).is_none() {
        return Err(TridError::BadNqn {
            key,
            nqn: nqn.to_owned(),
        });
    }
    Ok(nqn.to_owned())
}

fn flag(key: &'static str, value: &str) -> Result<bool, TridError> {
    match value {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(TridError::BadFlag {
            key,
            value: value.to_owned(),
        }),
    }
}

impl TransportId {
    /// Parses an SPDK-style NVMe/TCP transport id.
    pub fn parse(input: &str) -> Result<Self, TridError> {
        let input = input.trim();
        let mut fields: [Option<&str>; 8] = [None; 8];
        const KEYS: [&str; 8] = [
            "trtype", "adrfam", "traddr", "trsvcid", "subnqn", "hostnqn", "hdgst", "ddgst",
        ];
        for token in input.split_whitespace() {
            let (key, value) =
                token
                    .split_once([':', '='])
                    .ok_or_else(|| TridError::NotKeyValue {
                        token: token.to_owned(),
                        input: input.to_owned(),
                    })?;
            let index = KEYS
                .iter()
                .position(|k| k.eq_ignore_ascii_case(key))
                .ok_or_else(|| TridError::UnknownKey {
                    key: key.to_owned(),
                    input: input.to_owned(),
                })?;
            if fields[index].replace(value).is_some() {
                return Err(TridError::Duplicate {
                    key: key.to_owned(),
                    input: input.to_owned(),
                });
            }
        }
        let [trtype, adrfam, traddr, trsvcid, subnqn, hostnqn, hdgst, ddgst] = fields;
        let trtype = trtype.ok_or_else(|| TridError::MissingTrtype {
            input: input.to_owned(),
        })?;
        if !trtype.eq_ignore_ascii_case("tcp") {
            return Err(TridError::NotTcp {
                trtype: trtype.to_owned(),
            });
        }
        let traddr_text = traddr.ok_or_else(|| TridError::MissingTraddr {
            input: input.to_owned(),
        })?;
        let traddr: IpAddr = traddr_text
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| TridError::BadTraddr {
                traddr: traddr_text.to_owned(),
            })?;
        let family = if traddr.is_ipv4() {
            AddressFamily::Ipv4
        } else {
            AddressFamily::Ipv6
        };
        let adrfam = match adrfam {
            None => family,
            Some(a) => {
                let named = if a.eq_ignore_ascii_case("ipv4") {
                    AddressFamily::Ipv4
                } else if a.eq_ignore_ascii_case("ipv6") {
                    AddressFamily::Ipv6
                } else {
                    return Err(TridError::BadAdrfam {
                        adrfam: a.to_owned(),
                    });
                };
                if named != family {
                    return Err(TridError::AdrfamMismatch {
                        adrfam: a.to_owned(),
                        traddr: traddr_text.to_owned(),
                    });
                }
                named
            }
        };
        let trsvcid = match trsvcid {
            None => DEFAULT_PORT,
            Some(p) => match p.parse::<u16>() {
                Ok(port) if port != 0 => port,
                _ => {
                    return Err(TridError::BadPort {
                        trsvcid: p.to_owned(),
                    })
                }
            },
        };
        let subnqn = subnqn.unwrap_or(DISCOVERY_NQN);
        Ok(TransportId {
            adrfam,
            traddr,
            trsvcid,
            subnqn: check_nqn("subnqn", subnqn)?,
            hostnqn: hostnqn.map(|h| check_nqn("hostnqn", h)).transpose()?,
            hdgst: hdgst
                .map(|v| flag("hdgst", v))
                .transpose()?
                .unwrap_or(false),
            ddgst: ddgst
                .map(|v| flag("ddgst", v))
                .transpose()?
                .unwrap_or(false),
        })
    }

    /// Whether the id names the discovery subsystem (no `subnqn`, or the well-known one).
    pub fn is_discovery(&self) -> bool {
        self.subnqn == DISCOVERY_NQN
    }

    /// The socket address to connect to.
    pub fn socket_addr(&self) -> SocketAddr {
        SocketAddr::new(self.traddr, self.trsvcid)
    }
}

impl std::fmt::Display for TransportId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let adrfam = match self.adrfam {
            AddressFamily::Ipv4 => "IPv4",
            AddressFamily::Ipv6 => "IPv6",
        };
        write!(
            f,
            "trtype:TCP adrfam:{adrfam} traddr:{} trsvcid:{} subnqn:{}",
            self.traddr, self.trsvcid, self.subnqn
        )?;
        if let Some(h) = &self.hostnqn {
            write!(f, " hostnqn:{h}")?;
        }
        if self.hdgst {
            f.write_str(" hdgst:1")?;
        }
        if self.ddgst {
            f.write_str(" ddgst:1")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for TransportId {
    type Err = TridError;
    fn from_str(s: &str) -> Result<Self, TridError> {
        TransportId::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn spdk_form() {
        let t = TransportId::parse(
            "trtype:TCP adrfam:IPv4 traddr:127.0.0.1 trsvcid:4420 subnqn:nqn.2026-01.test:sub1",
        )
        .unwrap();
        assert_eq!(t.adrfam, AddressFamily::Ipv4);
        assert_eq!(t.socket_addr().to_string(), "127.0.0.1:4420");
        assert_eq!(t.subnqn, "nqn.2026-01.test:sub1");
        assert_eq!(t.hostnqn, None);
        let t = TransportId::parse(
            " trtype=tcp traddr=::1 subnqn=nqn.a:b hostnqn:nqn.2014-08.org.nvmexpress:uuid:x hdgst:1 ",
        )
        .unwrap();
        assert_eq!(t.adrfam, AddressFamily::Ipv6);
        assert_eq!(t.trsvcid, 4420);
        assert!(t.hdgst && !t.ddgst);
        assert_eq!(
            t.hostnqn.as_deref(),
            Some("nqn.2014-08.org.nvmexpress:uuid:x")
        );
        assert!(is_tcp_transport_id("trtype:TCP traddr:1.2.3.4"));
        assert!(!is_tcp_transport_id("trtype:PCIe traddr:0000:00:04.0"));
        assert!(!is_tcp_transport_id("0000:00:04.0"));
    }

    #[test]
    fn errors_name_the_problem() {
        let e = |s: &str| TransportId::parse(s).unwrap_err();
        assert!(matches!(
            e("traddr:1.2.3.4 subnqn:nqn.x"),
            TridError::MissingTrtype { .. }
        ));
        assert!(matches!(e("trtype:RDMA"), TridError::NotTcp { .. }));
        assert!(matches!(
            e("trtype:TCP subnqn:nqn.x"),
            TridError::MissingTraddr { .. }
        ));
        assert!(matches!(
            e("trtype:TCP traddr:host.example subnqn:nqn.x"),
            TridError::BadTraddr { .. }
        ));
        assert!(matches!(
            e("trtype:TCP traddr:1.2.3.4 trsvcid:0 subnqn:nqn.x"),
            TridError::BadPort { .. }
        ));
        assert!(matches!(
            e("trtype:TCP traddr:1.2.3.4 trsvcid:99999 subnqn:nqn.x"),
            TridError::BadPort { .. }
        ));
        let d = TransportId::parse("trtype:TCP traddr:1.2.3.4").unwrap();
        assert!(d.is_discovery());
        assert_eq!(d.subnqn, DISCOVERY_NQN);
        assert!(matches!(
            e("trtype:TCP traddr:1.2.3.4 subnqn:sub1"),
            TridError::BadNqn { .. }
        ));
        assert!(matches!(
            e("trtype:TCP adrfam:IPv6 traddr:1.2.3.4 subnqn:nqn.x"),
            TridError::AdrfamMismatch { .. }
        ));
        assert!(matches!(
            e("trtype:TCP adrfam:IB traddr:1.2.3.4 subnqn:nqn.x"),
            TridError::BadAdrfam { .. }
        ));
        assert!(matches!(
            e("trtype:TCP traddr:1.2.3.4 traddr:1.2.3.5 subnqn:nqn.x"),
            TridError::Duplicate { .. }
        ));
        assert!(matches!(
            e("trtype:TCP bogus"),
            TridError::NotKeyValue { .. }
        ));
        assert!(matches!(e("trtype:TCP ns:1"), TridError::UnknownKey { .. }));
        assert!(matches!(
            e("trtype:TCP traddr:1.2.3.4 subnqn:nqn.x hdgst:yes"),
            TridError::BadFlag { .. }
        ));
        let msg = e("trtype:TCP subnqn:nqn.x").to_string();
        assert!(msg.contains("traddr:127.0.0.1"), "{msg}");
    }

    proptest! {
        /// Display then parse gives the same id back, whatever the address, port and NQN.
        #[test]
        fn display_round_trips(
            v4 in any::<[u8; 4]>(),
            v6 in any::<[u16; 8]>(),
            use_v6 in any::<bool>(),
            port in 1u16..,
            sub in "nqn\\.[a-z0-9.:-]{1,200}",
            host in proptest::option::of("nqn\\.[a-z0-9.:-]{1,100}"),
            hdgst in any::<bool>(),
            ddgst in any::<bool>(),
        ) {
            let traddr: IpAddr = if use_v6 { v6.into() } else { v4.into() };
            let id = TransportId {
                adrfam: if use_v6 { AddressFamily::Ipv6 } else { AddressFamily::Ipv4 },
                traddr,
                trsvcid: port,
                subnqn: sub,
                hostnqn: host,
                hdgst,
                ddgst,
            };
            prop_assert_eq!(TransportId::parse(&id.to_string()), Ok(id));
        }

        /// Key order, key case and the `=` separator do not matter.
        #[test]
        fn order_and_case_do_not_matter(
            perm in Just(vec![0usize, 1, 2, 3]).prop_shuffle(),
            upper in any::<[bool; 4]>(),
            eq in any::<[bool; 4]>(),
        ) {
            let pairs = [("trtype", "TCP"), ("traddr", "10.1.2.3"), ("trsvcid", "4421"), ("subnqn", "nqn.x:y")];
            let text: Vec<String> = perm.iter().map(|&i| {
                let (k, v) = pairs[i];
                let k = if upper[i] { k.to_ascii_uppercase() } else { k.to_owned() };
                format!("{k}{}{v}", if eq[i] { '=' } else { ':' })
            }).collect();
            let id = TransportId::parse(&text.join(" ")).unwrap();
            prop_assert_eq!(id.socket_addr().to_string(), "10.1.2.3:4421");
            prop_assert_eq!(id.subnqn, "nqn.x:y");
        }

        /// Arbitrary input never panics: it parses or gives an error.
        #[test]
        fn never_panics(s in "\\PC{0,200}") {
            let _ = TransportId::parse(&s);
            let _ = is_tcp_transport_id(&s);
        }
    }
}
