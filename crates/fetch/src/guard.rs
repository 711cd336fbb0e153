//! The SSRF guard: which addresses the relay refuses to fetch from, and the resolver and
//! connector that enforce it at connect time.
//!
//! Three checks, so that no path to a refused address is left:
//! 1. [`GuardedResolver`] filters the addresses a host name resolves to, in the same lookup the
//!    connection then uses (a DNS answer that changes between a check and the connect cannot
//!    slip through);
//! 2. [`GuardedConnector`] refuses IP-literal hosts, which `HttpConnector` never hands to the
//!    resolver;
//! 3. [`GuardedConnector`] checks the peer address of every new connection before any byte is
//!    sent on it.

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::Uri;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tower_service::Service;

pub type BoxError = Box<dyn StdError + Send + Sync>;
type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;

/// Whether the relay refuses to connect to `ip` when private URLs are not allowed: loopback,
/// private (RFC 1918, CGNAT, unique local), link-local, multicast, unspecified, broadcast,
/// reserved, documentation and benchmarking ranges, and the IPv6 forms that embed an IPv4
/// address (mapped, compatible, translated, NAT64, 6to4) of any of those.
pub fn is_refused(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_refused_v4(v4),
        IpAddr::V6(v6) => is_refused_v6(v6),
    }
}

const V4_REFUSED: [(u32, u8); 15] = [
    (0x0000_0000, 8),  // 0.0.0.0/8 "this network" (0.0.0.0 reaches the local host)
    (0x0A00_0000, 8),  // 10.0.0.0/8 private
    (0x6440_0000, 10), // 100.64.0.0/10 carrier-grade NAT
    (0x7F00_0000, 8),  // 127.0.0.0/8 loopback
    (0xA9FE_0000, 16), // 169.254.0.0/16 link-local (cloud metadata services live here)
    (0xAC10_0000, 12), // 172.16.0.0/12 private
    (0xC000_0000, 24), // 192.0.0.0/24 IETF protocol assignments
    (0xC000_0200, 24), // 192.0.2.0/24 TEST-NET-1
    (0xC058_6300, 24), // 192.88.99.0/24 6to4 relay anycast
    (0xC0A8_0000, 16), // 192.168.0.0/16 private
    (0xC612_0000, 15), // 198.18.0.0/15 benchmarking
    (0xC633_6400, 24), // 198.51.100.0/24 TEST-NET-2
    (0xCB00_7100, 24), // 203.0.113.0/24 TEST-NET-3
    (0xE000_0000, 4),  // 224.0.0.0/4 multicast
    (0xF000_0000, 4),  // 240.0.0.0/4 reserved, and 255.255.255.255 broadcast
];

fn is_refused_v4(ip: Ipv4Addr) -> bool {
    let n = u32::from(ip);
    V4_REFUSED
        .iter()
        .any(|&(base, prefix)| n >> (32 - prefix) == base >> (32 - prefix))
}

const V6_REFUSED: [(u128, u8); 13] = [
    (0, 128),                                    // ::/128 unspecified
    (1, 128),                                    // ::1/128 loopback
    (0x0064_ff9b_0001 << 80, 48),                // 64:ff9b:1::/48 local-use NAT64
    (0x0100 << 112, 64),                         // 100::/64 discard-only
    (0x2001 << 112, 23),                         // 2001::/23 IETF assignments (Teredo, ...)
    (0x2001_0db8 << 96, 32),                     // 2001:db8::/32 documentation
    (0x3fff << 112, 20),                         // 3fff::/20 documentation
    (0x5f00 << 112, 16),                         // 5f00::/16 SRv6 SIDs
    (0xfc00 << 112, 7),                          // fc00::/7 unique local
    (0xfe80 << 112, 10),                         // fe80::/10 link-local
    (0xfec0 << 112, 10),                         // fec0::/10 site-local (deprecated)
    (0xff00 << 112, 8),                          // ff00::/8 multicast
    (0x0000_0000_0000_0000_ffff_0000 << 32, 96), // ::ffff:0:0:0/96 IPv4-translated
];

fn is_refused_v6(ip: Ipv6Addr) -> bool {
    let n = u128::from(ip);
    if V6_REFUSED
        .iter()
        .any(|&(base, prefix)| n >> (128 - prefix) == base >> (128 - prefix))
    {
        return true;
    }
    embedded_v4(ip).is_some_and(is_refused_v4)
}

/// The IPv4 address an IPv6 address stands for, for the forms that reach an IPv4 host.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let n = u128::from(ip);
    let low32 = Ipv4Addr::from((n & 0xFFFF_FFFF) as u32);
    let prefix96 = n >> 32;
    if prefix96 == 0xFFFF || prefix96 == 0 || prefix96 == 0x0064_ff9b_0000_0000_0000_0000 {
        // ::ffff:a.b.c.d mapped, ::a.b.c.d compatible, 64:ff9b::a.b.c.d NAT64
        return Some(low32);
    }
    if n >> 112 == 0x2002 {
        // 2002:aabb:ccdd::/48 6to4
        return Some(Ipv4Addr::from(((n >> 80) & 0xFFFF_FFFF) as u32));
    }
    None
}

/// The IP address an URL's host is written as, if it is an IP literal (brackets stripped).
/// Parsed exactly as `HttpConnector` does before it decides to skip the resolver.
pub(crate) fn literal_ip(uri: &Uri) -> Option<IpAddr> {
    let host = uri.host()?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(v4) = host.parse::<Ipv4Addr>() {
        return Some(IpAddr::V4(v4));
    }
    host.parse::<Ipv6Addr>().ok().map(IpAddr::V6)
}

/// A connection was refused because the host is, or resolves only to, refused addresses. The
/// fetch code finds it in the client error's source chain and turns it into
/// `FetchError::Blocked`.
#[derive(Debug)]
pub struct BlockedError {
    pub host: String,
}

impl fmt::Display for BlockedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} resolves to a refused address", self.host)
    }
}

impl StdError for BlockedError {}

/// What the guard lets through: everything (`allow_private`), or public addresses only.
#[derive(Debug, Clone)]
pub struct Policy {
    allow_private: bool,
    /// Addresses let through anyway, so that tests can have a "public" server on loopback.
    #[cfg(test)]
    exempt: Vec<IpAddr>,
}

impl Policy {
    pub fn new(allow_private: bool) -> Self {
        Policy {
            allow_private,
            #[cfg(test)]
            exempt: Vec::new(),
        }
    }

    #[cfg(test)]
    pub(crate) fn exempting(mut self, ips: &[IpAddr]) -> Self {
        self.exempt.extend_from_slice(ips);
        self
    }

    pub fn refuses(&self, ip: IpAddr) -> bool {
        #[cfg(test)]
        if self.exempt.contains(&ip) {
            return false;
        }
        !self.allow_private && is_refused(ip)
    }
}

/// Keeps the addresses the policy allows; an error naming the host when none is left.
fn filter_addrs(
    host: &str,
    addrs: Vec<SocketAddr>,
    policy: &Policy,
) -> Result<Vec<SocketAddr>, BoxError> {
    if addrs.is_empty() {
        return Err(format!("{host}: no addresses").into());
    }
    let kept: Vec<SocketAddr> = addrs
        .into_iter()
        .filter(|addr| !policy.refuses(addr.ip()))
        .collect();
    if kept.is_empty() {
        return Err(BlockedError {
            host: host.to_owned(),
        }
        .into());
    }
    Ok(kept)
}

/// A DNS resolver for `HttpConnector::new_with_resolver` that drops refused addresses (via
/// tokio's `lookup_host`, i.e. `getaddrinfo` on the blocking pool).
#[derive(Debug, Clone)]
pub struct GuardedResolver {
    policy: Arc<Policy>,
}

impl Service<Name> for GuardedResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = BoxError;
    type Future = BoxFuture<Self::Response>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let policy = Arc::clone(&self.policy);
        Box::pin(async move {
            let host = name.as_str();
            // Port 0: HttpConnector puts the URL's port on each address afterwards.
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, 0)).await?.collect();
            Ok(filter_addrs(host, addrs, &policy)?.into_iter())
        })
    }
}

/// `HttpConnector` with the guard around it: refuses IP-literal hosts and checks the peer
/// address of each new connection.
#[derive(Debug, Clone)]
pub struct GuardedConnector {
    inner: HttpConnector<GuardedResolver>,
    policy: Arc<Policy>,
}

impl GuardedConnector {
    pub fn new(policy: Arc<Policy>, connect_timeout: std::time::Duration) -> Self {
        let mut inner = HttpConnector::new_with_resolver(GuardedResolver {
            policy: Arc::clone(&policy),
        });
        // The TLS layer above us handles https; this connector must let those URIs through.
        inner.enforce_http(false);
        inner.set_nodelay(true);
        inner.set_connect_timeout(Some(connect_timeout));
        GuardedConnector { inner, policy }
    }
}

impl Service<Uri> for GuardedConnector {
    type Response = TokioIo<TcpStream>;
    type Error = BoxError;
    type Future = BoxFuture<Self::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let host = uri.host().unwrap_or_default().to_owned();
        if literal_ip(&uri).is_some_and(|ip| self.policy.refuses(ip)) {
            return Box::pin(std::future::ready(Err(BlockedError { host }.into())));
        }
        let policy = Arc::clone(&self.policy);
        let connecting = self.inner.call(uri);
        Box::pin(async move {
            let io = connecting.await?;
            let peer = io.inner().peer_addr()?;
            if policy.refuses(peer.ip()) {
                return Err(BlockedError { host }.into());
            }
            Ok(io)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn check(addr: &str, refused: bool) {
        let ip: IpAddr = addr.parse().unwrap();
        assert_eq!(is_refused(ip), refused, "{addr}");
    }

    #[test]
    fn classifies_ipv4() {
        for addr in [
            "0.0.0.0",
            "0.1.2.3",
            "10.0.0.1",
            "10.255.255.255",
            "100.64.0.1",
            "100.127.255.254",
            "127.0.0.1",
            "127.1.2.3",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.0.0.8",
            "192.0.2.1",
            "192.88.99.1",
            "192.168.1.1",
            "198.18.0.1",
            "198.19.255.255",
            "198.51.100.7",
            "203.0.113.9",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
        ] {
            check(addr, true);
        }
        for addr in [
            "1.1.1.1",
            "8.8.8.8",
            "9.255.255.255",
            "11.0.0.0",
            "100.63.255.255",
            "100.128.0.0",
            "126.255.255.255",
            "128.0.0.0",
            "169.253.255.255",
            "172.15.255.255",
            "172.32.0.0",
            "192.0.1.1",
            "192.167.255.255",
            "192.169.0.0",
            "198.17.255.255",
            "198.20.0.0",
            "223.255.255.255",
        ] {
            check(addr, false);
        }
    }

    #[test]
    fn classifies_ipv6() {
        for addr in [
            "::",
            "::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "febf::1",
            "fec0::1",
            "ff02::1",
            "ff05::2",
            "2001:db8::1",
            "2001::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "100::1",
            "64:ff9b:1::1",
            "3fff::1",
            // IPv4-mapped, -compatible, -translated, NAT64 and 6to4 forms of refused IPv4
            "::ffff:127.0.0.1",
            "::ffff:10.1.2.3",
            "::ffff:169.254.169.254",
            "::ffff:0.0.0.0",
            "::127.0.0.1",
            "::192.168.0.1",
            "::ffff:0:192.168.0.1",
            "64:ff9b::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::1",
            "2002:c0a8:101::1",
        ] {
            check(addr, true);
        }
        for addr in [
            "2606:4700:4700::1111",
            "2a00:1450:4001:82a::200e",
            "2400:cb00::1",
            "::ffff:8.8.8.8",
            "::8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
            "fbff:ffff::1",
            "fe00::1",
        ] {
            check(addr, false);
        }
    }

    #[test]
    fn literal_hosts_are_parsed_like_the_connector_does() {
        let ip = |u: &str| literal_ip(&u.parse::<Uri>().unwrap());
        assert_eq!(
            ip("http://127.0.0.1:80/x"),
            Some("127.0.0.1".parse().unwrap())
        );
        assert_eq!(ip("http://[::1]:8080/"), Some("::1".parse().unwrap()));
        assert_eq!(
            ip("https://[::ffff:10.0.0.1]/"),
            Some("::ffff:10.0.0.1".parse().unwrap())
        );
        assert_eq!(ip("http://example.com/"), None);
        // Not a literal to Rust's parser: goes through the resolver, whose answer is filtered.
        assert_eq!(ip("http://127.1/"), None);
        assert_eq!(ip("http://2130706433/"), None);
    }

    #[test]
    fn filtering_keeps_allowed_addresses_only() {
        let addr = |s: &str| s.parse::<SocketAddr>().unwrap();
        let mixed = vec![addr("127.0.0.1:0"), addr("93.184.215.14:0")];
        let public = Policy::new(false);
        let kept = filter_addrs("h", mixed.clone(), &public).unwrap();
        assert_eq!(kept, vec![addr("93.184.215.14:0")]);
        assert_eq!(
            filter_addrs("h", mixed.clone(), &Policy::new(true)).unwrap(),
            mixed
        );
        let private = vec![addr("[::1]:0"), addr("10.0.0.1:0")];
        let err = filter_addrs("h", private, &public).unwrap_err();
        assert!(err.downcast_ref::<BlockedError>().is_some());
        assert!(filter_addrs("h", vec![], &Policy::new(true)).is_err());
    }

    #[tokio::test]
    async fn the_connector_checks_the_peer_address() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        let uri: Uri = format!("http://localhost:{port}/").parse().unwrap();
        // A resolver that lets loopback through, so that only the peer check is left.
        let connector = |connector_policy: Policy| {
            let mut c = GuardedConnector::new(Arc::new(connector_policy), Duration::from_secs(5));
            c.inner = HttpConnector::new_with_resolver(GuardedResolver {
                policy: Arc::new(Policy::new(false).exempting(&[loopback])),
            });
            c.inner.enforce_http(false);
            c
        };
        let err = connector(Policy::new(false))
            .call(uri.clone())
            .await
            .unwrap_err();
        assert!(err.downcast_ref::<BlockedError>().is_some(), "{err}");
        let exempt = Policy::new(false).exempting(&[loopback]);
        assert!(connector(exempt).call(uri).await.is_ok());
    }
}
