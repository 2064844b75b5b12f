//! Cluster IPs and node ports for Services, from
//! `--service-cluster-ip-range` (default `10.96.0.0/12`) and
//! `--service-node-port-range` (default `30000-32767`), as upstream
//! allocates them: an address or port is never handed out twice, also
//! across replicas and concurrent creates, because each allocation is the
//! atomic create of its own storage key (`/registry/ranges/serviceips/<ip>`,
//! `/registry/ranges/servicenodeports/<port>`); deleting the service frees
//! them. The first address of the range is kept for the `kubernetes`
//! service, as upstream.

use crate::error::storage_error;
use std::net::Ipv4Addr;
use std::sync::Arc;
use wasm_apiserver_api::ApiError;
use wasm_apiserver_storage::{Storage, StorageError};

const IP_PREFIX: &str = "/registry/ranges/serviceips/";
const PORT_PREFIX: &str = "/registry/ranges/servicenodeports/";
/// Random picks tried before a full scan of the range.
const RANDOM_TRIES: usize = 32;

/// The pools services allocate from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ranges {
    /// First address and size of the cluster IP range.
    pub ip_base: u32,
    pub ip_count: u32,
    /// Inclusive node port range.
    pub ports: (u16, u16),
}

impl Default for Ranges {
    fn default() -> Self {
        Ranges::parse("10.96.0.0/12", "30000-32767").expect("the default ranges parse")
    }
}

impl Ranges {
    /// Parses `--service-cluster-ip-range` (an IPv4 CIDR) and
    /// `--service-node-port-range` (`low-high`).
    pub fn parse(cidr: &str, ports: &str) -> Result<Self, String> {
        let (addr, prefix) = cidr
            .split_once('/')
            .ok_or_else(|| format!("--service-cluster-ip-range {cidr:?}: not a CIDR"))?;
        let addr: Ipv4Addr = addr
            .parse()
            .map_err(|e| format!("--service-cluster-ip-range {cidr:?}: {e}"))?;
        let prefix: u32 = prefix
            .parse()
            .ok()
            .filter(|p| (8..=30).contains(p))
            .ok_or_else(|| {
                format!("--service-cluster-ip-range {cidr:?}: the prefix must be between 8 and 30")
            })?;
        let count = 1u32 << (32 - prefix);
        let (low, high) = ports
            .split_once('-')
            .and_then(|(l, h)| Some((l.trim().parse::<u16>().ok()?, h.trim().parse::<u16>().ok()?)))
            .filter(|(l, h)| l <= h)
            .ok_or_else(|| format!("--service-node-port-range {ports:?}: expected LOW-HIGH"))?;
        Ok(Ranges {
            ip_base: u32::from(addr) & !(count - 1),
            ip_count: count,
            ports: (low, high),
        })
    }

    /// The addresses services may get: not the network, broadcast or
    /// `kubernetes` service address.
    fn ip_offsets(&self) -> std::ops::Range<u32> {
        2..self.ip_count - 1
    }

    fn contains_ip(&self, ip: Ipv4Addr) -> bool {
        let n = u32::from(ip);
        n >= self.ip_base && self.ip_offsets().contains(&(n - self.ip_base))
    }

    /// The `kubernetes` Service's address: the range's first.
    pub fn kubernetes_ip(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.ip_base + 1)
    }

    /// Addresses a Service may ask for: the dynamic ones, and the
    /// `kubernetes` address, which only an explicit request gets (as the
    /// bootstrap controller makes).
    fn requestable(&self, ip: Ipv4Addr) -> bool {
        self.contains_ip(ip) || ip == self.kubernetes_ip()
    }
}

/// Allocates and frees cluster IPs and node ports in storage.
#[derive(Clone)]
pub struct Allocator {
    storage: Arc<dyn Storage>,
    pub ranges: Ranges,
}

fn random(below: u64) -> u64 {
    (uuid::Uuid::new_v4().as_u128() % u128::from(below.max(1))) as u64
}

impl Allocator {
    pub fn new(storage: Arc<dyn Storage>, ranges: Ranges) -> Self {
        Allocator { storage, ranges }
    }

    /// Takes `key`: `Ok(false)` when someone holds it.
    async fn take(&self, key: &str) -> Result<bool, ApiError> {
        match self.storage.create(key, b"{}".to_vec()).await {
            Ok(_) => Ok(true),
            Err(StorageError::AlreadyExists) => Ok(false),
            Err(e) => Err(storage_error(e)),
        }
    }

    /// Takes the first free candidate: random picks, then a scan.
    async fn take_any(
        &self,
        count: u64,
        key: impl Fn(u64) -> String,
        what: &str,
    ) -> Result<u64, ApiError> {
        for _ in 0..RANDOM_TRIES {
            let i = random(count);
            if self.take(&key(i)).await? {
                return Ok(i);
            }
        }
        for i in 0..count {
            if self.take(&key(i)).await? {
                return Ok(i);
            }
        }
        Err(ApiError::Internal(format!(
            "failed to allocate a {what}: the range is full"
        )))
    }

    /// A cluster IP: `requested` if given and free, else any free one.
    pub async fn take_ip(
        &self,
        requested: Option<&str>,
    ) -> Result<Ipv4Addr, Result<String, ApiError>> {
        if let Some(ip) = requested {
            let parsed: Ipv4Addr = ip.parse().map_err(|_| {
                Ok(format!(
                    "failed to allocate IP {ip}: not a valid IPv4 address"
                ))
            })?;
            if !self.ranges.requestable(parsed) {
                return Err(Ok(format!(
                    "failed to allocate IP {ip}: the provided IP ({ip}) is not in the valid range. The range of valid IPs is {}/{}",
                    Ipv4Addr::from(self.ranges.ip_base),
                    32 - self.ranges.ip_count.trailing_zeros()
                )));
            }
            return match self
                .take(&format!("{IP_PREFIX}{parsed}"))
                .await
                .map_err(Err)?
            {
                true => Ok(parsed),
                false => Err(Ok(format!(
                    "failed to allocate IP {ip}: provided IP is already allocated"
                ))),
            };
        }
        let offsets = self.ranges.ip_offsets();
        let base = self.ranges.ip_base + offsets.start;
        let i = self
            .take_any(
                u64::from(offsets.len() as u32),
                |i| format!("{IP_PREFIX}{}", Ipv4Addr::from(base + i as u32)),
                "cluster IP",
            )
            .await
            .map_err(Err)?;
        Ok(Ipv4Addr::from(base + i as u32))
    }

    /// A node port: `requested` if given and free, else any free one.
    pub async fn take_port(&self, requested: Option<u16>) -> Result<u16, Result<String, ApiError>> {
        let (low, high) = self.ranges.ports;
        if let Some(port) = requested {
            if !(low..=high).contains(&port) {
                return Err(Ok(format!(
                    "provided port is not in the valid range. The range of valid ports is {low}-{high}"
                )));
            }
            return match self
                .take(&format!("{PORT_PREFIX}{port}"))
                .await
                .map_err(Err)?
            {
                true => Ok(port),
                false => Err(Ok("provided port is already allocated".to_owned())),
            };
        }
        let i = self
            .take_any(
                u64::from(high - low) + 1,
                |i| format!("{PORT_PREFIX}{}", low as u64 + i),
                "node port",
            )
            .await
            .map_err(Err)?;
        Ok(low + i as u16)
    }

    pub async fn free_ip(&self, ip: &str) {
        let _ = self.storage.delete(&format!("{IP_PREFIX}{ip}"), None).await;
    }

    pub async fn free_port(&self, port: i64) {
        let _ = self
            .storage
            .delete(&format!("{PORT_PREFIX}{port}"), None)
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::Ranges;

    #[test]
    fn ranges_parse() {
        let r = Ranges::default();
        assert_eq!(r.ip_count, 1 << 20);
        assert_eq!(r.ports, (30000, 32767));
        assert!(r.contains_ip("10.96.0.10".parse().unwrap()));
        assert!(
            !r.contains_ip("10.96.0.1".parse().unwrap()),
            "kept for kubernetes"
        );
        assert!(!r.contains_ip("10.112.0.1".parse().unwrap()));
        assert!(Ranges::parse("10.0.0.0", "1-2").is_err());
        assert!(Ranges::parse("10.0.0.0/24", "9-2").is_err());
    }
}
