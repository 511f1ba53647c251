package io.orderly.peer;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.DeserializationExceptionHandler;
import org.apache.kafka.streams.errors.ErrorHandlerContext;

/**
 * KIP-1034 (Kafka Streams 4.x): a record whose value does not deserialize is dead-lettered by returning
 * {@code Response.resume(dlqRecords)}; Streams sends the dead letter through the task's own producer, so
 * under exactly_once_v2 it commits in the same transaction as the input offset. The dead letter is the
 * input record's key and value with orderly's headers (processor/dlq.rs): orderly.source.topic,
 * orderly.source.partition, orderly.source.offset, orderly.error.kind, orderly.error.message, and
 * orderly.redrive.count copied when the input carries it, so `orderly dlq list` reads the peer's letters.
 * (Streams' own default handler with errors.dead.letter.queue.topic.name writes its own
 * __streams.errors.* headers instead.) A non-poison failure (registry down for minutes) fails the thread.
 */
public final class DeadLetterHandler implements DeserializationExceptionHandler {
    private String topic;

    @Override
    public void configure(Map<String, ?> configs) {
        Object name = configs.get(StreamsConfig.ERRORS_DEAD_LETTER_QUEUE_TOPIC_NAME_CONFIG);
        if (name == null) throw new IllegalArgumentException(StreamsConfig.ERRORS_DEAD_LETTER_QUEUE_TOPIC_NAME_CONFIG + " is not set");
        topic = name.toString();
    }

    @Override
    public Response handleError(ErrorHandlerContext context, ConsumerRecord<byte[], byte[]> record, Exception exception) {
        PoisonException poison = null;
        for (Throwable t = exception; t != null; t = t.getCause()) {
            if (t instanceof PoisonException p) {
                poison = p;
                break;
            }
        }
        if (poison == null) return Response.fail();
        Counters.INSTANCE.seen();
        RecordHeaders headers = new RecordHeaders();
        headers.add("orderly.source.topic", utf8(context.topic()));
        headers.add("orderly.source.partition", utf8(Integer.toString(context.partition())));
        headers.add("orderly.source.offset", utf8(Long.toString(context.offset())));
        headers.add("orderly.error.kind", utf8(poison.kind));
        String message = poison.getMessage().substring(poison.kind.length() + 2);
        headers.add("orderly.error.message", utf8(message));
        Header redrive = record.headers().lastHeader("orderly.redrive.count");
        if (redrive != null) headers.add("orderly.redrive.count", redrive.value());
        Counters.INSTANCE.deadLettered.increment();
        return Response.resume(List.of(new ProducerRecord<>(topic, null, record.key(), record.value(), headers)));
    }

    private static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }
}
