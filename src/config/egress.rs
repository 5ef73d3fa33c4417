//! Where a handler's plugin may send HTTP requests: `capabilities.http`, an allow-list of
//! destinations, and the address rules applied after DNS resolution.
//!
//! ```yaml
//! handlers:
//!   notify:
//!     capabilities:
//!       http:
//!         - https://hooks.example.com             # exactly this host, port 443
//!         - http://receiver.observability.svc:8080
//!         - https://*.example.com:8443            # any subdomain (not example.com itself)
//!         - http://127.0.0.1:9000                 # an IP literal, and permission for loopback
//!         - https://10.0.0.0/8:*                  # a range of IP literals, any port
//! ```
//!
//! # Decision: an entry is scheme, host and port, nothing else
//!
//! The scheme is required (an `https` entry never allows plain `http`); the port is the
//! scheme's default unless written, `*` for any. A host is a DNS name (exact, or `*.suffix`
//! for its subdomains, never the apex, so `*.example.com` does not quietly allow
//! `example.com`), an IP address, or a CIDR range; an IP or range matches only requests
//! that name an IP literal. Paths are not part of an entry: a policy on paths is easy to get
//! around (encodings, redirects) and gives a false sense of safety.
//!
//! # Decision: addresses are checked after DNS, and the dangerous ones need naming
//!
//! A name on the list may still resolve to anything. After resolution, loopback, link-local
//! (169.254.0.0/16, where clouds serve instance metadata and credentials, and fe80::/10) and
//! unspecified addresses are refused unless an IP or range entry of that same kind names
//! them (`http://127.0.0.1:9000` does; `http://0.0.0.0/0:*` names no loopback); with
//! `outbound.refuse_private`, private ranges (10/8, 172.16/12, 192.168/16, 100.64/10,
//! fc00::/7) too.

use std::fmt;
use std::net::IpAddr;

/// `http` or `https`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HttpScheme {
    /// Plain HTTP.
    Http,
    /// HTTP over TLS.
    Https,
}

impl HttpScheme {
    /// The scheme as written in a URL.
    pub fn as_str(self) -> &'static str {
        match self {
            HttpScheme::Http => "http",
            HttpScheme::Https => "https",
        }
    }

    /// The port a URL of this scheme uses when it names none.
    pub fn default_port(self) -> u16 {
        match self {
            HttpScheme::Http => 80,
            HttpScheme::Https => 443,
        }
    }

    /// Parses `http` or `https` (any case).
    pub fn parse(text: &str) -> Option<Self> {
        match text.to_ascii_lowercase().as_str() {
            "http" => Some(HttpScheme::Http),
            "https" => Some(HttpScheme::Https),
            _ => None,
        }
    }
}

/// The host part of an allow-list entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostPattern {
    /// Exactly this DNS name (lowercase, without a trailing dot).
    Exact(String),
    /// Any name ending in `.SUFFIX` (stored without the leading dot); never the apex.
    Subdomains(String),
    /// An IP range (a single address has the full prefix length); matches IP literals.
    Range(IpRange),
}

/// An IP address range in CIDR form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpRange {
    /// The first address of the range.
    pub network: IpAddr,
    /// The prefix length in bits.
    pub prefix: u8,
}

impl IpRange {
    /// The range holding exactly `ip`.
    pub fn single(ip: IpAddr) -> Self {
        let prefix = if ip.is_ipv4() { 32 } else { 128 };
        Self {
            network: ip,
            prefix,
        }
    }

    /// Whether `ip` is in the range (an IPv4-mapped IPv6 address counts as its IPv4 form).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, canonical(ip)) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl fmt::Display for IpRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let full = if self.network.is_ipv4() { 32 } else { 128 };
        if self.prefix == full {
            write!(f, "{}", self.network)
        } else {
            write!(f, "{}/{}", self.network, self.prefix)
        }
    }
}

/// An IPv4-mapped IPv6 address as its IPv4 form; any other address as it is.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

/// One allow-list entry: scheme, host pattern, port (`None` for any).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EgressRule {
    /// The scheme the request must use.
    pub scheme: HttpScheme,
    /// The hosts it allows.
    pub host: HostPattern,
    /// The port it allows; `None` for any.
    pub port: Option<u16>,
}

impl EgressRule {
    /// Parses an entry as written in `capabilities.http`; the error says what is wrong.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (scheme, rest) = text.split_once("://").ok_or_else(|| {
            "write the scheme: http://HOST or https://HOST (an entry is scheme, host and port)"
                .to_string()
        })?;
        let scheme = HttpScheme::parse(scheme)
            .ok_or_else(|| format!("the scheme must be http or https, not {scheme:?}"))?;
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['?', '#', '@']) {
            return Err("an entry is scheme, host and port: no user, query or fragment".into());
        }
        let (host, port) = split_port(rest)?;
        let port = match port {
            None => Some(scheme.default_port()),
            Some("*") => None,
            Some(p) => Some(
                p.parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| format!("{p:?} is not a port (1 to 65535, or *)"))?,
            ),
        };
        let host = parse_host(host)?;
        Ok(Self { scheme, host, port })
    }

    /// Whether a request to `scheme://host:port` matches (`host` as the URL names it: a DNS
    /// name in any case, or an IP literal, IPv6 without brackets).
    pub fn allows(&self, scheme: HttpScheme, host: &str, port: u16) -> bool {
        if self.scheme != scheme || self.port.is_some_and(|p| p != port) {
            return false;
        }
        let literal = host.parse::<IpAddr>().ok();
        match (&self.host, literal) {
            (HostPattern::Range(range), Some(ip)) => range.contains(ip),
            (HostPattern::Range(_), None) | (_, Some(_)) => false,
            (HostPattern::Exact(name), None) => normal_name(host) == *name,
            (HostPattern::Subdomains(suffix), None) => {
                let host = normal_name(host);
                host.len() > suffix.len() + 1
                    && host.ends_with(suffix.as_str())
                    && host.as_bytes()[host.len() - suffix.len() - 1] == b'.'
            }
        }
    }
}

impl fmt::Display for EgressRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.scheme.as_str())?;
        match &self.host {
            HostPattern::Exact(name) => write!(f, "{name}")?,
            HostPattern::Subdomains(suffix) => write!(f, "*.{suffix}")?,
            HostPattern::Range(range) if range.network.is_ipv6() && range.prefix == 128 => {
                write!(f, "[{}]", range.network)?
            }
            HostPattern::Range(range) if range.network.is_ipv6() => {
                write!(f, "[{}]/{}", range.network, range.prefix)?
            }
            HostPattern::Range(range) => write!(f, "{range}")?,
        }
        match self.port {
            Some(p) if p == self.scheme.default_port() => Ok(()),
            Some(p) => write!(f, ":{p}"),
            None => write!(f, ":*"),
        }
    }
}

/// A DNS name lowercased, without a trailing dot.
fn normal_name(host: &str) -> String {
    host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase()
}

/// Splits `HOST[:PORT]`, where HOST may be `[v6]`, `[v6]/LEN` or `v4/LEN`.
fn split_port(rest: &str) -> Result<(&str, Option<&str>), String> {
    if rest.starts_with('[') {
        let close = rest
            .find(']')
            .ok_or("an IPv6 address is written in brackets: [fd00::1]")?;
        let after = &rest[close + 1..];
        // `[fd00::]/8:443`: the prefix length belongs to the host.
        let host_end = match after.strip_prefix('/') {
            Some(tail) => close + 2 + tail.find(':').unwrap_or(tail.len()),
            None => close + 1,
        };
        let (host, tail) = rest.split_at(host_end);
        return match tail.strip_prefix(':') {
            Some(port) => Ok((host, Some(port))),
            None if tail.is_empty() => Ok((host, None)),
            None => Err(format!("unexpected {tail:?} after the host")),
        };
    }
    if let Some((ip, tail)) = rest.split_once('/') {
        // `10.0.0.0/8` or `10.0.0.0/8:443`; anything else after a slash is a path.
        let (len, port) = match tail.split_once(':') {
            Some((len, port)) => (len, Some(port)),
            None => (tail, None),
        };
        if len.is_empty() || !len.chars().all(|c| c.is_ascii_digit()) {
            return Err("an entry is scheme, host and port, not a path".into());
        }
        return Ok((&rest[..ip.len() + 1 + len.len()], port));
    }
    Ok(match rest.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (rest, None),
    })
}

/// Parses the host part: `*.suffix`, a DNS name, an IP address or a CIDR range.
fn parse_host(host: &str) -> Result<HostPattern, String> {
    if host.is_empty() {
        return Err("name a host".into());
    }
    let unbracket = |h: &str| h.trim_start_matches('[').replace(']', "");
    if let Some((ip, len)) = host.split_once('/') {
        let ip: IpAddr = unbracket(ip)
            .parse()
            .map_err(|_| format!("{ip:?} is not an IP address (a range is written 10.0.0.0/8)"))?;
        let full = if ip.is_ipv4() { 32 } else { 128 };
        let prefix = len
            .parse::<u8>()
            .ok()
            .filter(|p| *p <= full)
            .ok_or_else(|| format!("{len:?} is not a prefix length (0 to {full})"))?;
        return Ok(HostPattern::Range(IpRange {
            network: canonical(ip),
            prefix,
        }));
    }
    if host.starts_with('[') {
        let ip: IpAddr = unbracket(host)
            .parse()
            .map_err(|_| format!("{host:?} is not an IPv6 address"))?;
        return Ok(HostPattern::Range(IpRange::single(canonical(ip))));
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(HostPattern::Range(IpRange::single(ip)));
    }
    let (wild, name) = match host.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, host),
    };
    let name = normal_name(name);
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    };
    if name.contains('*') {
        return Err(format!(
            "{host:?}: a wildcard is written only as the first label, *.example.com"
        ));
    }
    if !name.split('.').all(label_ok) {
        return Err(format!("{host:?} is not a host name"));
    }
    if wild && !name.contains('.') {
        return Err(format!(
            "{host:?} would allow every name under a top-level domain: name a domain, *.example.com"
        ));
    }
    Ok(if wild {
        HostPattern::Subdomains(name)
    } else {
        HostPattern::Exact(name)
    })
}

/// Why an address a name resolved to (or an IP literal) is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressClass {
    /// 127.0.0.0/8, ::1.
    Loopback,
    /// 169.254.0.0/16 (cloud instance metadata), fe80::/10.
    LinkLocal,
    /// 0.0.0.0, ::.
    Unspecified,
    /// 10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7 (refused only with `refuse_private`).
    Private,
}

impl AddressClass {
    /// The class of `ip` among those refused by default or on request; `None` for a public
    /// address.
    pub fn of(ip: IpAddr) -> Option<Self> {
        match canonical(ip) {
            IpAddr::V4(v4) => {
                let o = v4.octets();
                if v4.is_loopback() {
                    Some(Self::Loopback)
                } else if v4.is_link_local() {
                    Some(Self::LinkLocal)
                } else if v4.is_unspecified() {
                    Some(Self::Unspecified)
                } else if v4.is_private() || (o[0] == 100 && (o[1] & 0xc0) == 64) {
                    Some(Self::Private)
                } else {
                    None
                }
            }
            IpAddr::V6(v6) => {
                let first = v6.segments()[0];
                if v6.is_loopback() {
                    Some(Self::Loopback)
                } else if v6.is_unspecified() {
                    Some(Self::Unspecified)
                } else if first & 0xffc0 == 0xfe80 {
                    Some(Self::LinkLocal)
                } else if first & 0xfe00 == 0xfc00 {
                    Some(Self::Private)
                } else {
                    None
                }
            }
        }
    }

    /// The class in words, for errors and metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Loopback => "loopback",
            Self::LinkLocal => "link-local",
            Self::Unspecified => "unspecified",
            Self::Private => "private",
        }
    }
}

/// A handler's outbound HTTP policy: the allow-list and the address rules.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Egress {
    /// The entries of `capabilities.http`, in order.
    pub rules: Vec<EgressRule>,
    /// Refuse private addresses too, unless an entry names them.
    pub refuse_private: bool,
}

impl Egress {
    /// Whether nothing may be reached.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether the allow-list lets a request go to `scheme://host:port`.
    pub fn allows(&self, scheme: HttpScheme, host: &str, port: u16) -> bool {
        self.rules.iter().any(|r| r.allows(scheme, host, port))
    }

    /// Whether a connection may be made to `ip`; the class that refuses it otherwise. An
    /// address an IP or range entry names is always allowed.
    pub fn address(&self, ip: IpAddr) -> Result<(), AddressClass> {
        let Some(class) = AddressClass::of(ip) else {
            return Ok(());
        };
        if class == AddressClass::Private && !self.refuse_private {
            return Ok(());
        }
        // A range unlocks an address only if it lies in the same class: `10.0.0.0/8`
        // unlocks private 10.x, `0.0.0.0/0` unlocks no loopback or metadata address.
        let named = self.rules.iter().any(|r| {
            matches!(&r.host, HostPattern::Range(range)
                if range.contains(ip) && AddressClass::of(range.network) == Some(class))
        });
        if named { Ok(()) } else { Err(class) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(text: &str) -> EgressRule {
        EgressRule::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn scheme_host_and_default_port_must_all_match() {
        let r = rule("https://hooks.example.com");
        assert!(r.allows(HttpScheme::Https, "hooks.example.com", 443));
        assert!(r.allows(HttpScheme::Https, "HOOKS.Example.com.", 443));
        assert!(!r.allows(HttpScheme::Http, "hooks.example.com", 80));
        assert!(!r.allows(HttpScheme::Https, "hooks.example.com", 8443));
        assert!(!r.allows(HttpScheme::Https, "evil-hooks.example.com", 443));
        assert!(!r.allows(HttpScheme::Https, "hooks.example.com.evil.net", 443));
        let r = rule("http://receiver.observability.svc:8080/");
        assert!(r.allows(HttpScheme::Http, "receiver.observability.svc", 8080));
        assert!(!r.allows(HttpScheme::Http, "receiver.observability.svc", 80));
    }

    #[test]
    fn a_wildcard_matches_subdomains_not_the_apex() {
        let r = rule("https://*.example.com:8443");
        assert!(r.allows(HttpScheme::Https, "a.example.com", 8443));
        assert!(r.allows(HttpScheme::Https, "a.b.example.com", 8443));
        assert!(!r.allows(HttpScheme::Https, "example.com", 8443));
        assert!(!r.allows(HttpScheme::Https, "badexample.com", 8443));
        assert!(!r.allows(HttpScheme::Https, "a.example.com", 443));
        assert!(rule("https://*.example.com:*").allows(HttpScheme::Https, "x.example.com", 1));
    }

    #[test]
    fn ip_and_range_entries_match_ip_literals_only() {
        let r = rule("http://127.0.0.1:9000");
        assert!(r.allows(HttpScheme::Http, "127.0.0.1", 9000));
        assert!(!r.allows(HttpScheme::Http, "localhost", 9000));
        let r = rule("https://10.0.0.0/8:*");
        assert!(r.allows(HttpScheme::Https, "10.1.2.3", 8443));
        assert!(!r.allows(HttpScheme::Https, "11.0.0.1", 443));
        let r = rule("http://[fd00::]/8:8080");
        assert!(r.allows(HttpScheme::Http, "fd12::1", 8080));
        assert!(rule("http://[::1]:81").allows(HttpScheme::Http, "::1", 81));
        assert!(!rule("https://example.com").allows(HttpScheme::Https, "93.184.216.34", 443));
    }

    #[test]
    fn malformed_entries_say_what_is_wrong() {
        for (text, says) in [
            ("hooks.example.com", "write the scheme"),
            ("ftp://x.example.com", "must be http or https"),
            ("https://example.com/services/T0", "not a path"),
            ("https://example.com:0", "not a port"),
            ("https://example.com:99999", "not a port"),
            ("https://*.com", "every name under a top-level domain"),
            ("https://a.*.example.com", "only as the first label"),
            ("https://exa mple.com", "not a host name"),
            ("https://10.0.0.0/33", "not a prefix length"),
            ("https://user@example.com", "no user"),
            ("https://", "name a host"),
        ] {
            let error = EgressRule::parse(text).unwrap_err();
            assert!(error.contains(says), "{text}: {error}");
        }
    }

    #[test]
    fn dangerous_addresses_need_an_entry_that_names_them() {
        let egress = Egress {
            rules: vec![rule("https://*.example.com")],
            refuse_private: false,
        };
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(egress.address(ip("127.0.0.1")), Err(AddressClass::Loopback));
        assert_eq!(
            egress.address(ip("169.254.169.254")),
            Err(AddressClass::LinkLocal)
        );
        assert_eq!(
            egress.address(ip("::ffff:169.254.169.254")),
            Err(AddressClass::LinkLocal)
        );
        assert_eq!(egress.address(ip("fe80::1")), Err(AddressClass::LinkLocal));
        assert_eq!(
            egress.address(ip("0.0.0.0")),
            Err(AddressClass::Unspecified)
        );
        assert_eq!(egress.address(ip("10.0.0.1")), Ok(()));
        assert_eq!(egress.address(ip("93.184.216.34")), Ok(()));
        let strict = Egress {
            refuse_private: true,
            ..egress.clone()
        };
        assert_eq!(strict.address(ip("10.0.0.1")), Err(AddressClass::Private));
        assert_eq!(strict.address(ip("100.64.0.1")), Err(AddressClass::Private));
        let named = Egress {
            rules: vec![rule("http://127.0.0.1:9000"), rule("http://10.1.0.0/16")],
            refuse_private: true,
        };
        assert_eq!(named.address(ip("127.0.0.1")), Ok(()));
        assert_eq!(named.address(ip("127.0.0.2")), Err(AddressClass::Loopback));
        assert_eq!(named.address(ip("10.1.2.3")), Ok(()));
        assert_eq!(named.address(ip("10.2.0.1")), Err(AddressClass::Private));
        let everything = Egress {
            rules: vec![rule("http://0.0.0.0/0:*")],
            refuse_private: false,
        };
        assert_eq!(
            everything.address(ip("169.254.169.254")),
            Err(AddressClass::LinkLocal)
        );
        assert_eq!(
            everything.address(ip("127.0.0.1")),
            Err(AddressClass::Loopback)
        );
    }

    #[test]
    fn entries_print_as_written_in_short() {
        for text in [
            "https://hooks.example.com",
            "http://127.0.0.1:9000",
            "https://*.example.com:*",
            "http://[fd00::]/8:8080",
        ] {
            assert_eq!(rule(text).to_string(), text);
        }
    }
}
