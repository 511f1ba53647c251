//! The few Kafka requests librdkafka has no call for, spoken to one broker
//! over the wire: what a repair of a hanging transaction needs
//! (`DescribeProducers`, `ListTransactions`, `WriteTxnMarkers`: what
//! Kafka's own `kafka-transactions.sh` sends, KIP-664), and, for the tests
//! that force that signature, `InitProducerId`, `Produce` and
//! `IncrementalAlterConfigs`. The messages are `kafka-protocol`'s; this
//! module frames them, negotiates each request's version with the broker
//! (`ApiVersions`) and turns error codes into [`WireError`].
//!
//! Blocking, one request at a time, PLAINTEXT only: it serves operator
//! commands and tests, never the processing path. A cluster that requires
//! TLS or SASL is refused with [`WireError::Security`], which names Kafka's
//! own tool for the same step.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::error::ParseResponseErrorCode;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};

/// A request's reply larger than this is refused as not Kafka's.
const MAX_RESPONSE: usize = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub(crate) enum WireError {
    #[error("broker {broker}: {source}")]
    Io {
        broker: String,
        source: std::io::Error,
    },
    #[error("broker {broker}: {message}")]
    Protocol { broker: String, message: String },
    #[error(
        "broker {broker} does not support {api:?} at a version orderly speaks ({ours}; it offers {theirs}): \
         use Kafka's own kafka-transactions.sh for this step"
    )]
    Unsupported {
        broker: String,
        api: ApiKey,
        ours: String,
        theirs: String,
    },
    #[error("broker {broker} answered {api:?} with {code:?}{}", message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Kafka {
        broker: String,
        api: ApiKey,
        code: kafka_protocol::ResponseError,
        message: Option<String>,
    },
    #[error(
        "the cluster is reached over {protocol}, and this step speaks PLAINTEXT only: run the \
         kafka-transactions.sh command it names instead"
    )]
    Security { protocol: String },
}

/// Refuses a client configuration that is not PLAINTEXT.
pub(crate) fn require_plaintext(security_protocol: Option<&str>) -> Result<(), WireError> {
    match security_protocol {
        None => Ok(()),
        Some(p) if p.eq_ignore_ascii_case("plaintext") => Ok(()),
        Some(p) => Err(WireError::Security {
            protocol: p.to_string(),
        }),
    }
}

/// One connection to one broker, its request versions negotiated.
pub(crate) struct Connection {
    stream: TcpStream,
    broker: String,
    correlation: i32,
    versions: HashMap<i16, (i16, i16)>,
}

impl Connection {
    /// Connects to `broker` (`host:port`) and asks which versions it speaks.
    pub(crate) fn open(broker: &str, timeout: Duration) -> Result<Self, WireError> {
        let io = |source| WireError::Io {
            broker: broker.to_string(),
            source,
        };
        let address = broker
            .to_socket_addrs()
            .map_err(io)?
            .next()
            .ok_or_else(|| WireError::Protocol {
                broker: broker.to_string(),
                message: "the address resolves to nothing".into(),
            })?;
        let stream = TcpStream::connect_timeout(&address, timeout).map_err(io)?;
        stream.set_read_timeout(Some(timeout)).map_err(io)?;
        stream.set_write_timeout(Some(timeout)).map_err(io)?;
        let mut connection = Connection {
            stream,
            broker: broker.to_string(),
            correlation: 0,
            versions: HashMap::new(),
        };
        // Version 0: every broker answers it, whatever it speaks.
        let answer: ApiVersionsResponse =
            connection.exchange(ApiVersionsRequest::default(), ApiKey::ApiVersions, 0)?;
        connection.check(ApiKey::ApiVersions, answer.error_code, None)?;
        connection.versions = answer
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect();
        Ok(connection)
    }

    /// The broker's address, as given.
    pub(crate) fn broker(&self) -> &str {
        &self.broker
    }

    /// Sends `request` at the highest version both sides speak and returns
    /// the broker's answer (its error codes are the caller's to read).
    pub(crate) fn call<R: Request>(&mut self, request: R) -> Result<R::Response, WireError> {
        self.call_at_most(request, i16::MAX)
    }

    /// [`Self::call`] at version `cap` or below (a later version that
    /// changes the request's shape, as `Produce` v13 names topics by id).
    pub(crate) fn call_at_most<R: Request>(
        &mut self,
        request: R,
        cap: i16,
    ) -> Result<R::Response, WireError> {
        let api = ApiKey::try_from(R::KEY).map_err(|_| WireError::Protocol {
            broker: self.broker.clone(),
            message: format!("unknown api key {}", R::KEY),
        })?;
        let (min, max) = self.versions.get(&R::KEY).copied().unwrap_or((-1, -1));
        let version = R::VERSIONS.max.min(max).min(cap);
        if version < R::VERSIONS.min.max(min) || max < 0 {
            return Err(WireError::Unsupported {
                broker: self.broker.clone(),
                api,
                ours: format!("{}..={}", R::VERSIONS.min, R::VERSIONS.max),
                theirs: if max < 0 {
                    "none".into()
                } else {
                    format!("{min}..={max}")
                },
            });
        }
        self.exchange(request, api, version)
    }

    /// An error `code` the broker answered `api` with, as [`WireError::Kafka`].
    pub(crate) fn check(
        &self,
        api: ApiKey,
        code: i16,
        message: Option<&StrBytes>,
    ) -> Result<(), WireError> {
        match code.err() {
            None => Ok(()),
            Some(code) => Err(WireError::Kafka {
                broker: self.broker.clone(),
                api,
                code,
                message: message.map(|m| m.to_string()),
            }),
        }
    }

    fn exchange<Q, A>(&mut self, request: Q, api: ApiKey, version: i16) -> Result<A, WireError>
    where
        Q: Encodable + HeaderVersion,
        A: Decodable + HeaderVersion,
    {
        let protocol = |message: String| WireError::Protocol {
            broker: self.broker.clone(),
            message,
        };
        self.correlation = self.correlation.wrapping_add(1);
        let mut header = RequestHeader::default();
        header.request_api_key = api as i16;
        header.request_api_version = version;
        header.correlation_id = self.correlation;
        header.client_id = Some(StrBytes::from_static_str("orderly"));
        let mut body = BytesMut::new();
        header
            .encode(&mut body, Q::header_version(version))
            .map_err(|e| protocol(format!("encoding the {api:?} header: {e}")))?;
        request
            .encode(&mut body, version)
            .map_err(|e| protocol(format!("encoding {api:?}: {e}")))?;
        let length = i32::try_from(body.len()).map_err(|_| protocol("request too large".into()))?;
        let io = |source| WireError::Io {
            broker: self.broker.clone(),
            source,
        };
        self.stream.write_all(&length.to_be_bytes()).map_err(io)?;
        self.stream.write_all(&body).map_err(io)?;
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).map_err(io)?;
        let size = i32::from_be_bytes(size);
        let size = usize::try_from(size)
            .ok()
            .filter(|s| *s <= MAX_RESPONSE)
            .ok_or_else(|| protocol(format!("a reply of {size} bytes")))?;
        let mut reply = vec![0u8; size];
        self.stream.read_exact(&mut reply).map_err(io)?;
        let mut reply = Bytes::from(reply);
        let header = ResponseHeader::decode(&mut reply, A::header_version(version))
            .map_err(|e| protocol(format!("decoding the {api:?} reply's header: {e}")))?;
        if header.correlation_id != self.correlation {
            return Err(protocol(format!(
                "reply to request {} where {} was awaited",
                header.correlation_id, self.correlation
            )));
        }
        A::decode(&mut reply, version)
            .map_err(|e| protocol(format!("decoding the {api:?} reply: {e}")))
    }
}
