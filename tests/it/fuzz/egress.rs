//! The allow-list matcher with the connector's reading of a URL: entries parse or say why
//! and print back to themselves; any URL either fails to parse or gives a destination; an
//! IPv4 loopback or unspecified address in any spelling the URL parser takes (decimal,
//! octal, hex, short forms, a trailing dot, IPv4-mapped IPv6) reads as that address; and no
//! allow-list without an entry inside loopback ever lets the connector reach it.

use std::net::{IpAddr, Ipv4Addr};

use proptest::prelude::*;
use switchyard::config::egress::{Destination, Egress, EgressRule, Host, HttpScheme};

/// `n` written in base 10, 8 (`0` prefix) or 16 (`0x` prefix).
fn spell(n: u32, base: u8) -> String {
    match base {
        0 => n.to_string(),
        1 => format!("0{n:o}"),
        _ => format!("0x{n:x}"),
    }
}

/// `ip` spelled as the WHATWG parser still reads it as `ip`: 1 to 4 parts, the last taking
/// the remaining bytes, each part in any base, maybe a trailing dot.
fn spelling(ip: Ipv4Addr, parts: usize, bases: [u8; 4], dot: bool) -> String {
    let o = ip.octets().map(u32::from);
    let numbers: Vec<u32> = match parts {
        1 => vec![u32::from(ip)],
        2 => vec![o[0], (o[1] << 16) | (o[2] << 8) | o[3]],
        3 => vec![o[0], o[1], (o[2] << 8) | o[3]],
        _ => o.to_vec(),
    };
    let mut text: Vec<String> = numbers
        .iter()
        .zip(bases)
        .map(|(n, b)| spell(*n, b))
        .collect();
    if dot {
        text.push(String::new());
    }
    text.join(".")
}

/// Entries that name no loopback address, from a pool a user might write.
fn entry() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("http://0.0.0.0/0:*".to_string()),
        Just("https://[::]/0:*".to_string()),
        Just("http://0.0.0.0:*".to_string()),
        Just("http://[::ffff:0.0.0.0]/96:*".to_string()),
        Just("http://10.0.0.0/8:*".to_string()),
        Just("http://localhost:*".to_string()),
        Just("http://*.example.com:*".to_string()),
        (1u8..=223, any::<u8>(), 1u16..)
            .prop_filter("not loopback", |(a, _, _)| *a != 127)
            .prop_map(|(a, b, port)| format!("http://{a}.{b}.0.0/16:{port}")),
    ]
}

proptest! {
    #![proptest_config(super::cases(512))]

    #[test]
    fn entries_parse_or_say_why_and_print_back(text in "\\PC{0,40}") {
        if let Ok(rule) = EgressRule::parse(&text) {
            let again = EgressRule::parse(&rule.to_string());
            prop_assert_eq!(again.as_ref(), Ok(&rule), "{} printed as {}", text, rule);
        }
    }

    #[test]
    fn any_url_reads_as_a_destination_or_not_at_all(text in "(?i)https?://\\PC{0,40}") {
        if let Ok(url) = url::Url::parse(&text) {
            let _ = Destination::of(&url);
        }
    }

    #[test]
    fn a_local_ipv4_in_any_spelling_is_that_address_and_never_reached(
        low in 0u32..(1 << 24),
        local in prop_oneof![Just(127u8), Just(0u8)],
        parts in 1usize..=4,
        bases in any::<[u8; 4]>().prop_map(|b| b.map(|x| x % 3)),
        dot in any::<bool>(),
        port in 1u16..,
        mapped in any::<bool>(),
        entries in proptest::collection::vec(entry(), 0..6),
    ) {
        let ip = Ipv4Addr::from((u32::from(local) << 24) | low);
        let host = if mapped {
            format!("[::ffff:{ip}]")
        } else {
            spelling(ip, parts, bases, dot)
        };
        let url = url::Url::parse(&format!("http://{host}:{port}/x")).unwrap();
        let dest = Destination::of(&url).unwrap();
        prop_assert_eq!(&dest.host, &Host::Ip(IpAddr::V4(ip)), "{}", host);
        let egress = Egress {
            rules: entries.iter().map(|e| EgressRule::parse(e).unwrap()).collect(),
            refuse_private: false,
        };
        prop_assert!(
            egress.connect(HttpScheme::Http, IpAddr::V4(ip), port).is_err(),
            "{} reached through {:?}", host, entries
        );
    }
}
