"""boto3 against a moto server for the AWS sink tests: one JSON request on stdin, one JSON
answer on stdout.

{"endpoint": URL, "action": "setup"}: the queues, topic, bus, stream and group the tests send
to, and the subscriptions and rules that carry what reaches them to queues and a bucket.
{"endpoint": URL, "action": "read"}: what each destination holds now.
{"endpoint": URL, "action": "drain", "queues": {NAME: URL}}: the messages visible in each
queue now, hidden from later reads (so that reads in turn see each message once).
"""

import json
import sys

import boto3

REGION = "us-east-1"


def client(endpoint, service):
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def setup(endpoint):
    sqs = client(endpoint, "sqs")
    urls = {}
    for name in ["from-sns", "direct", "from-events"]:
        urls[name] = sqs.create_queue(QueueName=name)["QueueUrl"]
    urls["fifo"] = sqs.create_queue(
        QueueName="changes.fifo", Attributes={"FifoQueue": "true"}
    )["QueueUrl"]
    arn = lambda url: sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["QueueArn"]
    )["Attributes"]["QueueArn"]
    sns = client(endpoint, "sns")
    topic = sns.create_topic(Name="changes")["TopicArn"]
    sns.subscribe(
        TopicArn=topic,
        Protocol="sqs",
        Endpoint=arn(urls["from-sns"]),
        Attributes={"RawMessageDelivery": "true"},
    )
    events = client(endpoint, "events")
    events.create_event_bus(Name="k8s")
    events.put_rule(
        Name="all", EventBusName="k8s", EventPattern=json.dumps({"source": ["switchyard"]})
    )
    events.put_targets(
        Rule="all",
        EventBusName="k8s",
        Targets=[{"Id": "queue", "Arn": arn(urls["from-events"])}],
    )
    client(endpoint, "s3").create_bucket(Bucket="changes")
    client(endpoint, "firehose").create_delivery_stream(
        DeliveryStreamName="to-s3",
        S3DestinationConfiguration={
            "RoleARN": "arn:aws:iam::123456789012:role/firehose",
            "BucketARN": "arn:aws:s3:::changes",
            "BufferingHints": {"SizeInMBs": 1, "IntervalInSeconds": 60},
        },
    )
    client(endpoint, "logs").create_log_group(logGroupName="/k8s")
    return {"queues": urls, "topic": topic}


def messages(sqs, url):
    got = sqs.receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=10,
        AttributeNames=["All"],
        WaitTimeSeconds=0,
        VisibilityTimeout=0,
    ).get("Messages", [])
    return [{"body": m["Body"], "attributes": m.get("Attributes", {})} for m in got]


def drain(endpoint, queues):
    sqs = client(endpoint, "sqs")
    drained = {}
    for name, url in queues.items():
        got = []
        while True:
            batch = sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=10,
                AttributeNames=["All"],
                WaitTimeSeconds=0,
                VisibilityTimeout=600,
            ).get("Messages", [])
            if not batch:
                break
            got.extend({"body": m["Body"], "attributes": m.get("Attributes", {})} for m in batch)
        drained[name] = got
    return {"queues": drained}


def read(endpoint, queues):
    sqs = client(endpoint, "sqs")
    s3 = client(endpoint, "s3")
    objects = []
    for item in s3.list_objects_v2(Bucket="changes").get("Contents", []):
        body = s3.get_object(Bucket="changes", Key=item["Key"])["Body"].read()
        objects.append(body.decode())
    logs = client(endpoint, "logs")
    streams = [s["logStreamName"] for s in logs.describe_log_streams(logGroupName="/k8s")["logStreams"]]
    log_events = []
    for stream in streams:
        got = logs.get_log_events(logGroupName="/k8s", logStreamName=stream)["events"]
        log_events.extend(e["message"] for e in got)
    return {
        "queues": {name: messages(sqs, url) for name, url in queues.items()},
        "s3": objects,
        "log_streams": streams,
        "logs": log_events,
    }


def main():
    request = json.load(sys.stdin)
    endpoint = request["endpoint"]
    if request["action"] == "setup":
        answer = setup(endpoint)
    elif request["action"] == "drain":
        answer = drain(endpoint, request["queues"])
    else:
        answer = read(endpoint, request["queues"])
    json.dump(answer, sys.stdout)


if __name__ == "__main__":
    main()
