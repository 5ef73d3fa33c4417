//! Where a handler's plugin may send HTTP requests: `capabilities.http`, an allow-list of
//! destinations, and the address rules the connector applies to every address it connects to.
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
//! # Decision: one parser reads the URL, the way the HTTP client does
//!
//! A request's destination is read with the WHATWG URL parser the client itself uses
//! ([`Destination::of`]): `http://2130706433/`, `http://127.1/`, `http://0x7f.0.0.1/` and
//! `http://127.0.0.1./` are all the IP literal 127.0.0.1, never a name that an entry could
//! match by its spelling. Entries are read by the same rules, and an entry that spells an
//! address any other way than its plain form is refused, so what `check` shows is what runs.
//!
//! # Decision: addresses are checked where the socket is made, and the dangerous ones need an entry
//!
//! A name on the list may still resolve to anything. The connector checks every address it
//! is about to connect to, and the peer address of the socket it got: loopback,
//! link-local (169.254.0.0/16, where clouds serve instance metadata and credentials, and
//! fe80::/10) and, with `outbound.refuse_private`, private ranges (10/8, 172.16/12,
//! 192.168/16, 100.64/10, fc00::/7) are refused unless an IP or range entry allows a request
//! to that very address, scheme and port (the unlock is the entry's, port included), and
//! its range lies wholly inside that kind (`http://0.0.0.0/0:*` holds loopback but is not
//! inside it, so it unlocks none). Unspecified addresses (0.0.0.0/8, `::`), which Linux
//! connects to the local host, are refused always.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

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

/// The host of a request, as the URL parser reads it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    /// A DNS name: lowercase, IDNA-encoded, without a trailing dot.
    Name(String),
    /// An IP literal (an IPv4-mapped IPv6 address as its IPv4 form).
    Ip(IpAddr),
}

impl Host {
    /// Reads a host as the WHATWG URL parser does for `http` and `https` URLs: an IPv4
    /// address in any spelling (`2130706433`, `127.1`, `0x7f.0.0.1`, `127.0.0.1.`) is an IP,
    /// percent-escapes are decoded, names are lowercased; `[v6]` in brackets.
    pub fn parse(text: &str) -> Result<Self, String> {
        match url::Host::parse(text) {
            Ok(url::Host::Domain(name)) => Ok(Host::Name(
                name.strip_suffix('.').unwrap_or(&name).to_string(),
            )),
            Ok(url::Host::Ipv4(ip)) => Ok(Host::Ip(IpAddr::V4(ip))),
            Ok(url::Host::Ipv6(ip)) => Ok(Host::Ip(canonical(IpAddr::V6(ip)))),
            Err(e) => Err(format!("{text:?} is not a host: {e}")),
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// Where a request goes: scheme, host and port, read from its URL by the parser the HTTP
/// client uses, so the allow-list is matched on what the client will connect to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Destination {
    /// `http` or `https`.
    pub scheme: HttpScheme,
    /// The host, a name or an IP literal.
    pub host: Host,
    /// The port, the scheme's default when the URL names none.
    pub port: u16,
}

impl Destination {
    /// The destination of `url`; an error for a scheme other than http(s) or a URL without
    /// a host.
    pub fn of(url: &url::Url) -> Result<Self, String> {
        let scheme = HttpScheme::parse(url.scheme())
            .ok_or_else(|| format!("the scheme must be http or https, not {:?}", url.scheme()))?;
        let host = match url.host() {
            Some(url::Host::Domain(name)) => {
                Host::Name(name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase())
            }
            Some(url::Host::Ipv4(ip)) => Host::Ip(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => Host::Ip(canonical(IpAddr::V6(ip))),
            None => return Err("the URL names no host".into()),
        };
        let port = url.port().unwrap_or(scheme.default_port());
        Ok(Self { scheme, host, port })
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}:{}", self.scheme.as_str(), self.host, self.port)
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

/// An IP address range in CIDR form. An IPv4 range is always IPv4 (an IPv4-mapped IPv6
/// range of prefix 96 or more is kept as the IPv4 range it maps).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpRange {
    network: IpAddr,
    prefix: u8,
}

impl IpRange {
    /// The range of `prefix` bits from `ip` (its host bits cleared); `None` when the prefix
    /// is longer than the address. An IPv4-mapped IPv6 range becomes its IPv4 range.
    pub fn new(ip: IpAddr, prefix: u8) -> Option<Self> {
        let (ip, prefix) = match ip {
            IpAddr::V6(v6) if prefix >= 96 => match v6.to_ipv4_mapped() {
                Some(v4) => (IpAddr::V4(v4), prefix - 96),
                None => (ip, prefix),
            },
            other => (other, prefix),
        };
        let network = match ip {
            IpAddr::V4(v4) if prefix <= 32 => {
                IpAddr::V4(Ipv4Addr::from(u32::from(v4) & v4_mask(prefix)))
            }
            IpAddr::V6(v6) if prefix <= 128 => {
                IpAddr::V6(Ipv6Addr::from(u128::from(v6) & v6_mask(prefix)))
            }
            _ => return None,
        };
        Some(Self { network, prefix })
    }

    /// The range holding exactly `ip`.
    pub fn single(ip: IpAddr) -> Self {
        let ip = canonical(ip);
        let prefix = if ip.is_ipv4() { 32 } else { 128 };
        Self {
            network: ip,
            prefix,
        }
    }

    /// The first address of the range.
    pub fn network(&self) -> IpAddr {
        self.network
    }

    /// The prefix length in bits.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether `ip` is in the range (an IPv4-mapped IPv6 address counts as its IPv4 form).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, canonical(ip)) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                u32::from(net) == u32::from(ip) & v4_mask(self.prefix)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                u128::from(net) == u128::from(ip) & v6_mask(self.prefix)
            }
            _ => false,
        }
    }

    /// Whether every address of this range is also in `outer`.
    pub fn within(&self, outer: &IpRange) -> bool {
        self.prefix >= outer.prefix && outer.contains(self.network)
    }
}

/// The mask of an IPv4 prefix of `prefix` bits (0 to 32).
fn v4_mask(prefix: u8) -> u32 {
    u32::MAX
        .checked_shl(32 - u32::from(prefix.min(32)))
        .unwrap_or(0)
}

/// The mask of an IPv6 prefix of `prefix` bits (0 to 128).
fn v6_mask(prefix: u8) -> u128 {
    u128::MAX
        .checked_shl(128 - u32::from(prefix.min(128)))
        .unwrap_or(0)
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
        if rest.contains(['?', '#', '@', '%', '\\']) {
            return Err(
                "an entry is scheme, host and port: no user, query, fragment or escapes".into(),
            );
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

    /// Whether a request to `dest` matches.
    pub fn allows(&self, dest: &Destination) -> bool {
        if self.scheme != dest.scheme || self.port.is_some_and(|p| p != dest.port) {
            return false;
        }
        match (&self.host, &dest.host) {
            (HostPattern::Range(range), Host::Ip(ip)) => range.contains(*ip),
            (HostPattern::Range(_), Host::Name(_)) | (_, Host::Ip(_)) => false,
            (HostPattern::Exact(name), Host::Name(host)) => host == name,
            (HostPattern::Subdomains(suffix), Host::Name(host)) => {
                host.len() > suffix.len() + 1
                    && host.ends_with(suffix.as_str())
                    && host.as_bytes()[host.len() - suffix.len() - 1] == b'.'
            }
        }
    }
}

impl EgressRule {
    /// Whether every request this entry allows is also allowed by `outer`: the same scheme,
    /// a port `outer` allows (any port only under any port), and hosts inside `outer`'s.
    pub fn within(&self, outer: &EgressRule) -> bool {
        let port = match (self.port, outer.port) {
            (_, None) => true,
            (Some(mine), Some(theirs)) => mine == theirs,
            (None, Some(_)) => false,
        };
        let under = |name: &str, suffix: &str| {
            name.len() > suffix.len() + 1
                && name.ends_with(suffix)
                && name.as_bytes()[name.len() - suffix.len() - 1] == b'.'
        };
        let host = match (&self.host, &outer.host) {
            (HostPattern::Exact(mine), HostPattern::Exact(theirs)) => mine == theirs,
            (HostPattern::Exact(mine), HostPattern::Subdomains(suffix)) => under(mine, suffix),
            (HostPattern::Subdomains(mine), HostPattern::Subdomains(suffix)) => {
                mine == suffix || under(mine, suffix)
            }
            (HostPattern::Range(mine), HostPattern::Range(theirs)) => mine.within(theirs),
            _ => false,
        };
        self.scheme == outer.scheme && port && host
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

/// Parses an IP address written plainly: dotted-decimal IPv4, or IPv6 in brackets.
fn plain_ip(text: &str) -> Result<IpAddr, String> {
    let parsed = match text.strip_prefix('[') {
        Some(inner) => inner
            .strip_suffix(']')
            .and_then(|v6| v6.parse::<Ipv6Addr>().ok())
            .map(IpAddr::V6),
        None => text.parse::<Ipv4Addr>().ok().map(IpAddr::V4),
    };
    parsed.ok_or_else(|| format!("{text:?} is not an IP address (write 10.0.0.1 or [fd00::1])"))
}

/// Parses the host part: `*.suffix`, a DNS name, an IP address or a CIDR range. A host the
/// URL parser would read as an IP address must be written as one, plainly.
fn parse_host(host: &str) -> Result<HostPattern, String> {
    if host.is_empty() {
        return Err("name a host".into());
    }
    if let Some((ip, len)) = host.split_once('/') {
        let ip = plain_ip(ip)?;
        let full = if ip.is_ipv4() { 32 } else { 128 };
        let range = len
            .parse::<u8>()
            .ok()
            .filter(|p| *p <= full)
            .and_then(|p| IpRange::new(ip, p))
            .ok_or_else(|| format!("{len:?} is not a prefix length (0 to {full})"))?;
        return Ok(HostPattern::Range(range));
    }
    if host.starts_with('[') {
        return Ok(HostPattern::Range(IpRange::single(plain_ip(host)?)));
    }
    let (wild, name) = match host.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, host),
    };
    if name.contains('*') {
        return Err(format!(
            "{host:?}: a wildcard is written only as the first label, *.example.com"
        ));
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    };
    let bare = name.strip_suffix('.').unwrap_or(name);
    if !bare.split('.').all(label_ok) {
        return Err(format!("{host:?} is not a host name"));
    }
    let read = Host::parse(name)?;
    let name = match read {
        Host::Ip(ip) if !wild && name == ip.to_string() => {
            return Ok(HostPattern::Range(IpRange::single(ip)));
        }
        Host::Ip(ip) => {
            return Err(format!(
                "{host:?} is the IP address {ip} spelled another way: write {ip}"
            ));
        }
        Host::Name(name) => name,
    };
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

/// Why an address the connector was about to connect to is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressClass {
    /// 127.0.0.0/8, ::1.
    Loopback,
    /// 169.254.0.0/16 (cloud instance metadata), fe80::/10.
    LinkLocal,
    /// 0.0.0.0/8, `::`: Linux connects them to the local host; refused always.
    Unspecified,
    /// 10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7 (refused only with `refuse_private`).
    Private,
}

/// The ranges of each refused class.
const CLASS_RANGES: &[(AddressClass, &str)] = &[
    (AddressClass::Loopback, "127.0.0.0/8"),
    (AddressClass::Loopback, "::1/128"),
    (AddressClass::LinkLocal, "169.254.0.0/16"),
    (AddressClass::LinkLocal, "fe80::/10"),
    (AddressClass::Unspecified, "0.0.0.0/8"),
    (AddressClass::Unspecified, "::/128"),
    (AddressClass::Private, "10.0.0.0/8"),
    (AddressClass::Private, "172.16.0.0/12"),
    (AddressClass::Private, "192.168.0.0/16"),
    (AddressClass::Private, "100.64.0.0/10"),
    (AddressClass::Private, "fc00::/7"),
];

/// The range `text` (`ADDR/LEN`) of [`CLASS_RANGES`].
fn class_range(text: &str) -> IpRange {
    let (ip, len) = text.split_once('/').unwrap_or((text, ""));
    let ip = ip.parse().unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    IpRange::new(ip, len.parse().unwrap_or(0)).unwrap_or(IpRange::single(ip))
}

impl AddressClass {
    /// The class of `ip` among those refused by default or on request, with the class's
    /// range that holds it; `None` for a public address.
    fn find(ip: IpAddr) -> Option<(Self, IpRange)> {
        CLASS_RANGES.iter().find_map(|(class, range)| {
            let range = class_range(range);
            range.contains(ip).then_some((*class, range))
        })
    }

    /// The class of `ip` among those refused by default or on request; `None` for a public
    /// address.
    pub fn of(ip: IpAddr) -> Option<Self> {
        Self::find(ip).map(|(class, _)| class)
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

    /// Whether the allow-list lets a request go to `dest`.
    pub fn allows(&self, dest: &Destination) -> bool {
        self.rules.iter().any(|r| r.allows(dest))
    }

    /// Whether a connection for a request of `scheme` may be made to `ip` on `port`; the
    /// class that refuses it otherwise. A loopback, link-local or (with `refuse_private`)
    /// private address is allowed only by an IP or range entry that allows a request to
    /// that address, scheme and port, and whose range lies inside the address's class; an
    /// unspecified address never.
    pub fn connect(&self, scheme: HttpScheme, ip: IpAddr, port: u16) -> Result<(), AddressClass> {
        let Some((class, class_range)) = AddressClass::find(ip) else {
            return Ok(());
        };
        match class {
            AddressClass::Unspecified => return Err(class),
            AddressClass::Private if !self.refuse_private => return Ok(()),
            _ => {}
        }
        let dest = Destination {
            scheme,
            host: Host::Ip(canonical(ip)),
            port,
        };
        let named = self.rules.iter().any(|r| {
            matches!(&r.host, HostPattern::Range(range) if range.within(&class_range))
                && r.allows(&dest)
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

    fn dest(url: &str) -> Destination {
        Destination::of(&url::Url::parse(url).unwrap()).unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn scheme_host_and_default_port_must_all_match() {
        let r = rule("https://hooks.example.com");
        assert!(r.allows(&dest("https://hooks.example.com/x")));
        assert!(r.allows(&dest("HTTPS://HOOKS.Example.com./x")));
        assert!(!r.allows(&dest("http://hooks.example.com")));
        assert!(!r.allows(&dest("https://hooks.example.com:8443")));
        assert!(!r.allows(&dest("https://evil-hooks.example.com")));
        assert!(!r.allows(&dest("https://hooks.example.com.evil.net")));
        let r = rule("http://receiver.observability.svc:8080/");
        assert!(r.allows(&dest("http://receiver.observability.svc:8080")));
        assert!(!r.allows(&dest("http://receiver.observability.svc")));
    }

    #[test]
    fn a_wildcard_matches_subdomains_not_the_apex() {
        let r = rule("https://*.example.com:8443");
        assert!(r.allows(&dest("https://a.example.com:8443")));
        assert!(r.allows(&dest("https://a.b.example.com:8443")));
        assert!(!r.allows(&dest("https://example.com:8443")));
        assert!(!r.allows(&dest("https://badexample.com:8443")));
        assert!(!r.allows(&dest("https://a.example.com")));
        assert!(rule("https://*.example.com:*").allows(&dest("https://x.example.com:1")));
    }

    #[test]
    fn ip_and_range_entries_match_ip_literals_only() {
        let r = rule("http://127.0.0.1:9000");
        assert!(r.allows(&dest("http://127.0.0.1:9000")));
        assert!(!r.allows(&dest("http://localhost:9000")));
        let r = rule("https://10.0.0.0/8:*");
        assert!(r.allows(&dest("https://10.1.2.3:8443")));
        assert!(!r.allows(&dest("https://11.0.0.1")));
        let r = rule("http://[fd00::]/8:8080");
        assert!(r.allows(&dest("http://[fd12::1]:8080")));
        assert!(rule("http://[::1]:81").allows(&dest("http://[::1]:81")));
        assert!(!rule("https://example.com").allows(&dest("https://93.184.216.34")));
    }

    /// Regression: IPv4 addresses spelled as names (`2130706433`, `127.1`, `0x7f.0.0.1`,
    /// `0177.0.0.1`, a trailing dot) matched a name entry spelled the same way, and the
    /// client then connected to 127.0.0.1 with no address check.
    #[test]
    fn an_ipv4_address_in_any_spelling_is_an_ip_literal() {
        for url in [
            "http://2130706433:1/",
            "http://127.1:1/",
            "http://0x7f.0.0.1:1/",
            "http://0177.0.0.1:1/",
            "http://127.0.0.1.:1/",
            "http://%31%32%37.0.0.1:1/",
            "http://[::ffff:127.0.0.1]:1/",
            "http://[::ffff:7f00:1]:1/",
            "HTTP://user:pw@127.0.0.1:1/",
        ] {
            assert_eq!(dest(url).host, Host::Ip(ip("127.0.0.1")), "{url}");
        }
        for entry in [
            "http://2130706433:1",
            "http://127.1:1",
            "http://0x7f.0.0.1:1",
            "http://0177.0.0.1:1",
            "http://127.0.0.1.:1",
        ] {
            let error = EgressRule::parse(entry).unwrap_err();
            assert!(error.contains("spelled another way"), "{entry}: {error}");
        }
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
            ("https://[::ffff:127.0.0.1]/129", "not a prefix length"),
            ("https://user@example.com", "no user"),
            ("https://%65xample.com", "escapes"),
            ("https://[fe80::1%25eth0]", "escapes"),
            ("https://", "name a host"),
        ] {
            let error = EgressRule::parse(text).unwrap_err();
            assert!(error.contains(says), "{text}: {error}");
        }
    }

    /// Regression: `[::ffff:127.0.0.1]/128` was kept as IPv4 with prefix 128, and its mask
    /// wrapped to match every IPv4 address.
    #[test]
    fn an_ipv4_mapped_range_is_the_ipv4_range_it_maps() {
        let r = rule("http://[::ffff:127.0.0.1]/128:*");
        assert_eq!(r.to_string(), "http://127.0.0.1:*");
        assert!(r.allows(&dest("http://127.0.0.1:5")));
        assert!(!r.allows(&dest("http://8.8.8.8:5")));
        let r = rule("http://[::ffff:10.0.0.0]/104:*");
        assert_eq!(r.to_string(), "http://10.0.0.0/8:*");
        assert!(!r.allows(&dest("http://11.0.0.1:5")));
    }

    #[test]
    fn dangerous_addresses_need_an_entry_that_names_them() {
        let egress = Egress {
            rules: vec![rule("https://*.example.com")],
            refuse_private: false,
        };
        let http = HttpScheme::Http;
        assert_eq!(
            egress.connect(http, ip("127.0.0.1"), 80),
            Err(AddressClass::Loopback)
        );
        assert_eq!(
            egress.connect(http, ip("169.254.169.254"), 80),
            Err(AddressClass::LinkLocal)
        );
        assert_eq!(
            egress.connect(http, ip("::ffff:169.254.169.254"), 80),
            Err(AddressClass::LinkLocal)
        );
        assert_eq!(
            egress.connect(http, ip("fe80::1"), 80),
            Err(AddressClass::LinkLocal)
        );
        assert_eq!(egress.connect(http, ip("10.0.0.1"), 80), Ok(()));
        assert_eq!(egress.connect(http, ip("93.184.216.34"), 80), Ok(()));
        let strict = Egress {
            refuse_private: true,
            ..egress.clone()
        };
        assert_eq!(
            strict.connect(http, ip("10.0.0.1"), 80),
            Err(AddressClass::Private)
        );
        assert_eq!(
            strict.connect(http, ip("100.64.0.1"), 80),
            Err(AddressClass::Private)
        );
        let named = Egress {
            rules: vec![rule("http://127.0.0.1:9000"), rule("http://10.1.0.0/16:*")],
            refuse_private: true,
        };
        assert_eq!(named.connect(http, ip("127.0.0.1"), 9000), Ok(()));
        assert_eq!(
            named.connect(http, ip("127.0.0.2"), 9000),
            Err(AddressClass::Loopback)
        );
        assert_eq!(named.connect(http, ip("10.1.2.3"), 1), Ok(()));
        assert_eq!(
            named.connect(http, ip("10.2.0.1"), 1),
            Err(AddressClass::Private)
        );
    }

    /// Regression: an IP entry unlocked its address on every port and scheme, so a name
    /// resolving to 127.0.0.1 reached any loopback port once one was allowed.
    #[test]
    fn an_address_is_unlocked_for_its_entrys_scheme_and_port_only() {
        let named = Egress {
            rules: vec![rule("http://127.0.0.1:27699")],
            refuse_private: false,
        };
        let ip = ip("127.0.0.1");
        assert_eq!(named.connect(HttpScheme::Http, ip, 27699), Ok(()));
        assert_eq!(
            named.connect(HttpScheme::Http, ip, 27620),
            Err(AddressClass::Loopback)
        );
        assert_eq!(
            named.connect(HttpScheme::Https, ip, 27699),
            Err(AddressClass::Loopback)
        );
    }

    /// Regression: `0.0.0.0/0` and `[::]/0` unlocked 0.0.0.0, `::` and `::ffff:0.0.0.0`,
    /// which Linux connects to the local host.
    #[test]
    fn a_range_wider_than_a_class_unlocks_none_of_it_and_unspecified_never() {
        let everything = Egress {
            rules: vec![
                rule("http://0.0.0.0/0:*"),
                rule("http://[::]/0:*"),
                rule("http://0.0.0.0:*"),
                rule("http://[::]:*"),
            ],
            refuse_private: true,
        };
        for (address, class) in [
            ("169.254.169.254", AddressClass::LinkLocal),
            ("127.0.0.1", AddressClass::Loopback),
            ("::1", AddressClass::Loopback),
            ("0.0.0.0", AddressClass::Unspecified),
            ("0.1.2.3", AddressClass::Unspecified),
            ("::", AddressClass::Unspecified),
            ("::ffff:0.0.0.0", AddressClass::Unspecified),
            ("10.0.0.1", AddressClass::Private),
        ] {
            assert_eq!(
                everything.connect(HttpScheme::Http, ip(address), 80),
                Err(class),
                "{address}"
            );
        }
        assert_eq!(
            everything.connect(HttpScheme::Http, ip("8.8.8.8"), 80),
            Ok(())
        );
        assert!(everything.allows(&dest("http://8.8.8.8")));
        let loopback = Egress {
            rules: vec![rule("http://127.0.0.0/8:*")],
            refuse_private: false,
        };
        assert_eq!(
            loopback.connect(HttpScheme::Http, ip("127.3.0.1"), 5),
            Ok(())
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
