//! AWS's SigV4 test suite (`aws-sig-v4-test-suite`): each case's request, and the canonical
//! request, string to sign and signature AWS publishes for it. Every case signs with the
//! suite's credentials, in `us-east-1` for the service `service`, at 2015-08-30T12:36:00Z.

use super::*;

const HOST: &str = "example.amazonaws.com";
const AT: u64 = 1_440_938_160;
const EMPTY: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
const TOKEN: &str = "AQoDYXdzEPT//////////wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQWLWsKWHGBuFqwAeMicRXmxfpSPfIeoIYRqTflfKD8YUuwthAx7mSEI/qkPpKPi/kMcGdQrmGdeehM4IC1NtBmUpp2wUE8phUZampKsburEDy0KPkyQDYwT7WZ0wq5VSXDvp75YU9HFvlRd8Tx6q6fE8YQcHNVXAkiY9q6d+xo0rKwT38xVqr7ZD0u0iPPkUL64lIZbqBAz+scqKmlzm8FDrypNC9Yjc8fPOLn9FX9KSYvKTr4rvx3iSIlTJabIQwj2ICCR/oLxBA==";

fn credentials() -> Credentials {
    Credentials::new("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
}

const SCOPE: Scope<'static> = Scope {
    region: "us-east-1",
    service: "service",
};

fn signed(request: Request<'_>) -> Signed {
    sign(&request, &credentials(), &SCOPE, AT)
}

fn authorization(signed_headers: &str, signature: &str) -> String {
    format!(
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
         SignedHeaders={signed_headers}, Signature={signature}"
    )
}

#[test]
fn get_vanilla() {
    let signed = signed(Request::new("GET", HOST, b""));
    assert_eq!(
        signed.canonical_request,
        format!("GET\n/\n\nhost:{HOST}\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n{EMPTY}")
    );
    assert_eq!(
        signed.authorization,
        authorization(
            "host;x-amz-date",
            "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
        )
    );
    assert_eq!(signed.amz_date, "20150830T123600Z");
    assert_eq!(signed.security_token, None);
}

#[test]
fn post_vanilla_and_post_vanilla_query() {
    assert_eq!(
        signed(Request::new("POST", HOST, b"")).signature,
        "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"
    );
    let query = signed(Request {
        query: "Param1=value1",
        ..Request::new("POST", HOST, b"")
    });
    assert_eq!(
        query.string_to_sign,
        "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n\
         9d659678c1756bb3113e2ce898845a0a79dbbc57b740555917687f1b3340fbbd"
    );
    assert_eq!(
        query.signature,
        "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11"
    );
}

#[test]
fn get_vanilla_query_order_key_case() {
    let signed = signed(Request {
        query: "Param2=value2&Param1=value1",
        ..Request::new("GET", HOST, b"")
    });
    assert!(
        signed
            .canonical_request
            .starts_with("GET\n/\nParam1=value1&Param2=value2\n"),
        "{}",
        signed.canonical_request
    );
    assert_eq!(
        signed.signature,
        "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"
    );
}

#[test]
fn post_header_key_case_and_value_case() {
    let key_case = signed(Request::new("POST", HOST, b"").header("MY-HEADER1", "value1"));
    assert_eq!(
        key_case.authorization,
        authorization(
            "host;my-header1;x-amz-date",
            "c5410059b04c1ee005303aed430f6e6645f61f4dc9e1461ec8f8916fdf18852c"
        )
    );
    let value_case = signed(Request::new("POST", HOST, b"").header("My-Header1", "VALUE1"));
    assert_eq!(
        value_case.signature,
        "cdbc9802e29d2942e5e10b5bccfdd67c5f22c7c4e8ae67b53629efa58b974b7d"
    );
}

#[test]
fn get_header_value_trim_and_key_duplicate() {
    let trim = signed(
        Request::new("GET", HOST, b"")
            .header("My-Header1", " value1")
            .header("My-Header2", " \"a   b   c\""),
    );
    assert!(
        trim.canonical_request
            .contains("\nmy-header1:value1\nmy-header2:\"a b c\"\n"),
        "{}",
        trim.canonical_request
    );
    assert_eq!(
        trim.signature,
        "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736"
    );
    let duplicate = signed(
        Request::new("GET", HOST, b"")
            .header("My-Header1", "value2")
            .header("My-Header1", "value2")
            .header("My-Header1", "value1"),
    );
    assert!(
        duplicate
            .canonical_request
            .contains("\nmy-header1:value2,value2,value1\n")
    );
    assert_eq!(
        duplicate.signature,
        "c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea"
    );
}

#[test]
fn post_x_www_form_urlencoded() {
    let signed = signed(
        Request::new("POST", HOST, b"Param1=value1")
            .header("Content-Type", "application/x-www-form-urlencoded"),
    );
    assert_eq!(
        signed.canonical_request,
        "POST\n/\n\ncontent-type:application/x-www-form-urlencoded\nhost:example.amazonaws.com\n\
         x-amz-date:20150830T123600Z\n\ncontent-type;host;x-amz-date\n\
         9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e"
    );
    assert!(
        signed
            .string_to_sign
            .ends_with("\n42a5e5bb34198acb3e84da4f085bb7927f2bc277ca766e6d19c73c2154021281")
    );
    assert_eq!(
        signed.authorization,
        authorization(
            "content-type;host;x-amz-date",
            "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a"
        )
    );
}

#[test]
fn post_sts_header_before_signs_the_session_token() {
    let credentials = credentials().with_session_token(TOKEN);
    let signed = sign(&Request::new("POST", HOST, b""), &credentials, &SCOPE, AT);
    assert!(
        signed
            .string_to_sign
            .ends_with("\nc237e1b440d4c63c32ca95b5b99481081cb7b13c7e40434868e71567c1a882f6")
    );
    assert_eq!(
        signed.authorization,
        authorization(
            "host;x-amz-date;x-amz-security-token",
            "85d96828115b5dc0cfc3bd16ad9e210dd772bbebba041836c64533a82be05ead"
        )
    );
    let headers = signed.headers();
    assert_eq!(headers[2], ("x-amz-security-token", TOKEN.to_string()));
}

#[test]
fn credentials_never_print_their_secret() {
    let shown = format!("{:?}", credentials().with_session_token(TOKEN));
    assert!(!shown.contains("wJalrXUtnFEMI"), "{shown}");
    assert!(!shown.contains("AQoDYXdz"), "{shown}");
    assert!(shown.contains("AKIDEXAMPLE"), "{shown}");
}

#[test]
fn dates_convert_both_ways() {
    assert_eq!(amz_date(0), "19700101T000000Z");
    assert_eq!(amz_date(AT), "20150830T123600Z");
    assert_eq!(amz_date(1_835_481_599), "20280229T235959Z");
    assert_eq!(parse_iso8601("2015-08-30T12:36:00Z"), Some(AT));
    assert_eq!(parse_iso8601("2015-08-30T12:36:00.123Z"), Some(AT));
    assert_eq!(parse_iso8601("2028-02-29T23:59:59Z"), Some(1_835_481_599));
    assert_eq!(parse_iso8601("2015-08-30T12:36:00"), None);
    assert_eq!(parse_iso8601("2015-13-30T12:36:00Z"), None);
    assert_eq!(parse_iso8601("yesterday"), None);
}
