//! Host names as `admin.allowed_hosts` lists them and as a request's `Host` header gives
//! them: a name or an address, and maybe a port. Both are read by the one parser here, so
//! what the config accepts is exactly what a request can match; names compare without case
//! and without a final dot, as DNS does.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;

/// Why a host cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// Nothing was written.
    #[error("the host is empty")]
    Empty,
    /// The port is not a number from 0 to 65535.
    #[error("{0:?} is not a port (a number from 0 to 65535)")]
    Port(String),
    /// An IPv6 address without brackets, or brackets around something else.
    #[error("{0:?} is not an IPv6 address in brackets (write [::1] or [::1]:9470)")]
    Ipv6(String),
    /// A character a host name cannot hold (a scheme, a path, a space…).
    #[error("{0:?} is not a host name, an IP address or either with :PORT (no scheme or path)")]
    Name(String),
}

/// A host and maybe a port: `name`, `name:9470`, `10.0.0.5:9470`, `[::1]:9470`. The host
/// is kept in lowercase, without a final dot, an IPv6 address in brackets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    /// The name or address.
    pub host: String,
    /// The port, when one is written.
    pub port: Option<u16>,
}

impl HostPort {
    /// The host as an IP address, when it is one.
    pub fn ip(&self) -> Option<IpAddr> {
        let inner = self
            .host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(&self.host);
        inner.parse().ok()
    }
}

impl FromStr for HostPort {
    type Err = HostError;

    fn from_str(text: &str) -> Result<Self, HostError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(HostError::Empty);
        }
        if text.contains(['/', '@', '?', '#']) || text.contains(char::is_whitespace) {
            return Err(HostError::Name(text.into()));
        }
        let (host, port) = if text.starts_with('[') {
            let Some(end) = text.find(']') else {
                return Err(HostError::Ipv6(text.into()));
            };
            let (host, rest) = text.split_at(end + 1);
            if host[1..host.len() - 1].parse::<Ipv6Addr>().is_err() {
                return Err(HostError::Ipv6(text.into()));
            }
            match rest {
                "" => (host, None),
                _ => match rest.strip_prefix(':') {
                    Some(port) => (host, Some(port)),
                    None => return Err(HostError::Ipv6(text.into())),
                },
            }
        } else {
            match text.split_once(':') {
                Some((host, port)) if !port.contains(':') => (host, Some(port)),
                Some(_) => return Err(HostError::Ipv6(text.into())),
                None => (text, None),
            }
        };
        let port = port
            .map(|p| p.parse::<u16>().map_err(|_| HostError::Port(p.into())))
            .transpose()?;
        let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
        let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_');
        let bracketed = host.starts_with('[');
        if host.is_empty() || (!bracketed && !host.chars().all(allowed)) || host.len() > 253 {
            return Err(HostError::Name(text.into()));
        }
        Ok(Self { host, port })
    }
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            Some(port) => write!(f, "{}:{port}", self.host),
            None => f.write_str(&self.host),
        }
    }
}

/// An entry of `admin.allowed_hosts`: `*` for any host, or a host that matches on any port
/// when written without one, on that port only when written with one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// `*`: every host.
    Any,
    /// This host (and port, if given).
    Exact(HostPort),
}

impl HostPattern {
    /// Whether `given` (a request's host) is allowed by this entry.
    pub fn matches(&self, given: &HostPort) -> bool {
        match self {
            Self::Any => true,
            Self::Exact(allowed) => {
                allowed.host == given.host && allowed.port.is_none_or(|p| given.port == Some(p))
            }
        }
    }
}

impl FromStr for HostPattern {
    type Err = HostError;

    fn from_str(text: &str) -> Result<Self, HostError> {
        match text.trim() {
            "*" => Ok(Self::Any),
            other => other.parse().map(Self::Exact),
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Any => f.write_str("*"),
            Self::Exact(host) => host.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(text: &str) -> HostPort {
        text.parse().unwrap()
    }

    #[test]
    fn hosts_are_read_with_and_without_ports_in_lowercase_without_a_final_dot() {
        assert_eq!(
            host("Admin.Example.:9470"),
            HostPort {
                host: "admin.example".into(),
                port: Some(9470)
            }
        );
        assert_eq!(host("[::1]:80").host, "[::1]");
        assert_eq!(host("[::1]").port, None);
        assert_eq!(host("10.0.0.5").ip(), Some("10.0.0.5".parse().unwrap()));
        assert_eq!(host("[::1]:1").ip(), Some("::1".parse().unwrap()));
        assert_eq!(host("localhost").ip(), None);
    }

    #[test]
    fn what_is_not_a_host_is_refused_saying_why() {
        let refused = |text: &str| text.parse::<HostPort>().unwrap_err().to_string();
        assert_eq!(refused(" "), "the host is empty");
        assert!(refused("a:port").contains("\"port\" is not a port"));
        assert!(refused("a:70000").contains("\"70000\" is not a port"));
        assert!(refused("::1").contains("IPv6 address in brackets"));
        assert!(refused("[nope]:1").contains("IPv6 address in brackets"));
        assert!(refused("[::1]x").contains("IPv6 address in brackets"));
        assert!(refused("http://a").contains("no scheme or path"));
        assert!(refused("a/b").contains("no scheme or path"));
        assert!(refused(":80").contains("no scheme or path"));
    }

    #[test]
    fn a_pattern_without_a_port_matches_any_port_and_a_star_matches_everything() {
        let name: HostPattern = "switchyard.ops.svc".parse().unwrap();
        assert!(name.matches(&host("switchyard.ops.svc:9470")));
        assert!(name.matches(&host("SWITCHYARD.ops.svc")));
        assert!(!name.matches(&host("evil.example")));
        let port: HostPattern = "switchyard:9470".parse().unwrap();
        assert!(port.matches(&host("switchyard:9470")));
        assert!(!port.matches(&host("switchyard:80")));
        assert!(!port.matches(&host("switchyard")));
        assert!(HostPattern::Any.matches(&host("evil.example")));
        assert_eq!("*".parse::<HostPattern>().unwrap(), HostPattern::Any);
    }
}
