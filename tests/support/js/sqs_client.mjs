// The AWS SDK for JavaScript v3, unmodified, against s3q's SQS endpoint.
// usage: node sqs_client.mjs ENDPOINT KEY_ID SECRET
// Prints one JSON document of what it saw; any unexpected answer throws (exit code 1).
// The SDK checks the MD5 digests of bodies and attributes on every send and receive.
import {
  SQSClient,
  CreateQueueCommand,
  GetQueueUrlCommand,
  SendMessageCommand,
  SendMessageBatchCommand,
  ReceiveMessageCommand,
  DeleteMessageCommand,
  DeleteMessageBatchCommand,
  ChangeMessageVisibilityCommand,
  GetQueueAttributesCommand,
  SetQueueAttributesCommand,
  ListQueuesCommand,
  TagQueueCommand,
  ListQueueTagsCommand,
  PurgeQueueCommand,
  DeleteQueueCommand,
} from "@aws-sdk/client-sqs";

const [endpoint, accessKeyId, secretAccessKey] = process.argv.slice(2);
const sqs = new SQSClient({
  endpoint,
  region: "us-east-1",
  credentials: { accessKeyId, secretAccessKey },
  maxAttempts: 1,
});
const seen = {};

function check(condition, what) {
  if (!condition) throw new Error(`unexpected: ${what}`);
}

async function errorName(command) {
  try {
    await sqs.send(command);
  } catch (err) {
    return err.name;
  }
  throw new Error(`${command.constructor.name} should have failed`);
}

const { QueueUrl: url } = await sqs.send(
  new CreateQueueCommand({ QueueName: "js-standard", Attributes: { VisibilityTimeout: "30" } }),
);
check((await sqs.send(new GetQueueUrlCommand({ QueueName: "js-standard" }))).QueueUrl === url, "url");
seen.missingQueue = await errorName(new GetQueueUrlCommand({ QueueName: "no-such-queue" }));

const attributes = {
  text: { DataType: "String", StringValue: "héllo" },
  count: { DataType: "Number", StringValue: "42" },
  blob: { DataType: "Binary", BinaryValue: new Uint8Array([0, 1, 2, 255]) },
};
const sent = await sqs.send(
  new SendMessageCommand({ QueueUrl: url, MessageBody: "one ✓", MessageAttributes: attributes }),
);
check(sent.MessageId && sent.MD5OfMessageAttributes, "send answer");
const batch = await sqs.send(
  new SendMessageBatchCommand({
    QueueUrl: url,
    Entries: Array.from({ length: 9 }, (_, i) => ({
      Id: `e${i}`,
      MessageBody: `batch ${i}`,
      MessageAttributes: { n: { DataType: "Number", StringValue: String(i) } },
    })),
  }),
);
check(batch.Successful.length === 9 && !(batch.Failed || []).length, "batch send");

const received = [];
while (received.length < 10) {
  const got = await sqs.send(
    new ReceiveMessageCommand({
      QueueUrl: url,
      MaxNumberOfMessages: 10,
      MessageAttributeNames: ["All"],
      MessageSystemAttributeNames: ["All"],
      WaitTimeSeconds: 1,
    }),
  );
  received.push(...(got.Messages || []));
}
seen.bodies = received.map((m) => m.Body).sort();
const one = received.find((m) => m.Body === "one ✓");
seen.attributes = {
  text: one.MessageAttributes.text.StringValue,
  count: one.MessageAttributes.count.StringValue,
  blob: Array.from(one.MessageAttributes.blob.BinaryValue),
};
seen.receiveCount = one.Attributes.ApproximateReceiveCount;
seen.sentTimestamp = Number(one.Attributes.SentTimestamp);

await sqs.send(
  new ChangeMessageVisibilityCommand({ QueueUrl: url, ReceiptHandle: one.ReceiptHandle, VisibilityTimeout: 0 }),
);
const others = received.filter((m) => m !== one);
const deleted = await sqs.send(
  new DeleteMessageBatchCommand({
    QueueUrl: url,
    Entries: others.map((m, i) => ({ Id: `d${i}`, ReceiptHandle: m.ReceiptHandle })),
  }),
);
check(deleted.Successful.length === 9, "batch delete");
const [again] = (await sqs.send(new ReceiveMessageCommand({ QueueUrl: url, WaitTimeSeconds: 1 }))).Messages;
check(again.Body === "one ✓", "the message made visible again");
await sqs.send(new DeleteMessageCommand({ QueueUrl: url, ReceiptHandle: again.ReceiptHandle }));

await sqs.send(new SetQueueAttributesCommand({ QueueUrl: url, Attributes: { DelaySeconds: "5" } }));
await sqs.send(new TagQueueCommand({ QueueUrl: url, Tags: { team: "js" } }));
seen.tags = (await sqs.send(new ListQueueTagsCommand({ QueueUrl: url }))).Tags;
seen.queueAttributes = (
  await sqs.send(new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ["All"] }))
).Attributes;

const { QueueUrl: fifo } = await sqs.send(
  new CreateQueueCommand({
    QueueName: "js-orders.fifo",
    Attributes: { FifoQueue: "true", ContentBasedDeduplication: "true" },
  }),
);
for (const body of ["first", "second", "first"]) {
  await sqs.send(new SendMessageCommand({ QueueUrl: fifo, MessageBody: body, MessageGroupId: "g" }));
}
const fifoBodies = [];
for (;;) {
  const got = await sqs.send(
    new ReceiveMessageCommand({ QueueUrl: fifo, MessageSystemAttributeNames: ["All"], WaitTimeSeconds: 1 }),
  );
  if (!got.Messages) break;
  for (const m of got.Messages) {
    fifoBodies.push([m.Body, m.Attributes.MessageGroupId, Boolean(m.Attributes.SequenceNumber)]);
    await sqs.send(new DeleteMessageCommand({ QueueUrl: fifo, ReceiptHandle: m.ReceiptHandle }));
  }
}
seen.fifo = fifoBodies;
seen.fifoWithoutGroup = await errorName(new SendMessageCommand({ QueueUrl: fifo, MessageBody: "x" }));

seen.queues = ((await sqs.send(new ListQueuesCommand({}))).QueueUrls || []).map((u) => u.split("/").pop()).sort();
await sqs.send(new PurgeQueueCommand({ QueueUrl: url }));
await sqs.send(new DeleteQueueCommand({ QueueUrl: fifo }));
seen.afterDelete = await errorName(new GetQueueUrlCommand({ QueueName: "js-orders.fifo" }));
const forged = new SQSClient({
  endpoint,
  region: "us-east-1",
  credentials: { accessKeyId, secretAccessKey: "not-the-secret" },
  maxAttempts: 1,
});
seen.badSignature = await forged.send(new ListQueuesCommand({})).then(
  () => "accepted",
  (err) => err.name,
);
console.log(JSON.stringify(seen));
